//! The comparison UI: its files (from `ui/`) are embedded in the binary and served at `/`, so
//! running it needs nothing but the server. With `TRAINLOG_UI_DIR` set to a checkout's `ui/`
//! folder, the files are read from there on each request instead, for working on the UI
//! without rebuilding.
//!
//! The UI is native ES modules: `app.js` imports the others by relative paths, so each module is
//! served at `/ui/` followed by its path under `ui/`. A test below checks that every `.js` and
//! `.css` file of `ui/` (but its tests) is in [`ASSETS`].

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use ring::digest::{digest, SHA256};

/// A file of `ui/` served at `/ui/` followed by its path, with its content type and embedded text.
macro_rules! ui_file {
    ($path:literal, $content_type:expr) => {
        (concat!("/ui/", $path), $path, $content_type, include_str!(concat!("../ui/", $path)))
    };
}

/// Each served file: its URL path, its path under `ui/`, its content type and its embedded text.
const ASSETS: &[(&str, &str, &str, &str)] = &[
    ("/", "index.html", "text/html; charset=utf-8", include_str!("../ui/index.html")),
    ui_file!("app.css", CSS),
    // The entry module (the router), and the modules it imports.
    ui_file!("app.js", JS),
    ui_file!("charts.js", JS),
    ui_file!("system-charts.js", JS),
    ui_file!("workspace.js", JS),
    ui_file!("lib/address.js", JS),
    ui_file!("lib/api.js", JS),
    ui_file!("lib/bars.js", JS),
    ui_file!("lib/chart-axes.js", JS),
    ui_file!("lib/chart-export.js", JS),
    ui_file!("lib/ansi.js", JS),
    ui_file!("lib/colors.js", JS),
    ui_file!("lib/scatter.js", JS),
    ui_file!("lib/importance.js", JS),
    ui_file!("lib/dom.js", JS),
    ui_file!("lib/downloads.js", JS),
    ui_file!("lib/format.js", JS),
    ui_file!("lib/line-diff.js", JS),
    ui_file!("lib/media-hist.js", JS),
    ui_file!("lib/media-table.js", JS),
    ui_file!("lib/media.js", JS),
    ui_file!("lib/parcoords.js", JS),
    ui_file!("lib/runs.js", JS),
    ui_file!("lib/session.js", JS),
    ui_file!("views/alerts.js", JS),
    ui_file!("views/compare.js", JS),
    ui_file!("views/cost-panel.js", JS),
    ui_file!("views/models.js", JS),
    ui_file!("views/projects.js", JS),
    ui_file!("views/report-trend.js", JS),
    ui_file!("views/report.js", JS),
    ui_file!("views/run-artifacts.js", JS),
    ui_file!("views/run-logs.js", JS),
    ui_file!("views/run-media.js", JS),
    ui_file!("views/run.js", JS),
    ui_file!("views/runs-columns.js", JS),
    ui_file!("views/runs-filter.js", JS),
    ui_file!("views/runs-column-menu.js", JS),
    ui_file!("views/runs-table.js", JS),
    ui_file!("views/sweeps.js", JS),
    (
        "/ui/vendor/uPlot.iife.min.js",
        "vendor/uplot/uPlot.iife.min.js",
        JS,
        include_str!("../ui/vendor/uplot/uPlot.iife.min.js"),
    ),
    ("/ui/vendor/uPlot.min.css", "vendor/uplot/uPlot.min.css", CSS, include_str!("../ui/vendor/uplot/uPlot.min.css")),
    ui_file!("favicon.svg", SVG),
    ("/favicon.ico", "favicon.svg", SVG, include_str!("../ui/favicon.svg")),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Whether a path is one of the UI's files (as the router matches it).
pub fn is_asset(path: &str) -> bool {
    ASSETS.iter().any(|&(route, ..)| route == path)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    let from_disk = std::env::var_os("TRAINLOG_UI_DIR").map(std::path::PathBuf::from);
    for &(route, file, content_type, embedded) in ASSETS {
        let path = from_disk.as_ref().map(|dir| dir.join(file));
        cfg.route(
            route,
            web::get().to(move |req: HttpRequest| {
                let path = path.clone();
                async move {
                    match path {
                        Some(path) => from_disk_file(&path, content_type).await,
                        None => embedded_file(&req, route, content_type, embedded),
                    }
                }
            }),
        );
    }
}

/// A file read from `TRAINLOG_UI_DIR` on each request, never cached.
async fn from_disk_file(path: &std::path::Path, content_type: &'static str) -> HttpResponse {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => {
            HttpResponse::Ok().content_type(content_type).insert_header((header::CACHE_CONTROL, NO_CACHE)).body(text)
        }
        Err(e) => {
            HttpResponse::NotFound().content_type("text/plain; charset=utf-8").body(format!("{}: {e}", path.display()))
        }
    }
}

const NO_CACHE: &str = "no-cache";
/// For a file asked for by its content's hash (`?v=`): that URL's bytes never change.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// An embedded file. The page (`/`) names every file by its content's hash, so a browser keeps
/// those for good and asks again only for what changed; a file asked for without the hash is
/// revalidated on each use by its tag (an empty 304 when the browser holds it).
fn embedded_file(req: &HttpRequest, route: &str, content_type: &'static str, embedded: &'static str) -> HttpResponse {
    let versions = versions();
    let body = if route == "/" { versions.page.as_str() } else { embedded };
    let tag = format!("\"{}\"", versions.of(route).unwrap_or_default());
    // The page is always sent whole: it carries its own Content-Security-Policy, which a 304
    // would replace with the server's default.
    if route != "/" && matches_tag(req, &tag) {
        return HttpResponse::NotModified()
            .insert_header((header::ETAG, tag))
            .insert_header((header::CACHE_CONTROL, NO_CACHE))
            .finish();
    }
    let versioned = route != "/" && req.query_string().split('&').any(|pair| pair.starts_with("v="));
    let mut answer = HttpResponse::Ok();
    if route == "/" {
        answer.insert_header((header::CONTENT_SECURITY_POLICY, versions.page_policy.as_str()));
    }
    answer
        .content_type(content_type)
        .insert_header((header::ETAG, tag))
        .insert_header((header::CACHE_CONTROL, if versioned { IMMUTABLE } else { NO_CACHE }))
        .body(body)
}

/// Each embedded file's version (the start of its SHA-256, in hex), and the page rewritten to
/// name every file by it: `src` and `href` get `?v=`, and an import map sends each module's
/// plain URL (what relative imports resolve to) to its versioned one, with a modulepreload link
/// per module so the browser asks for them at once rather than import by import.
struct Versions {
    by_route: Vec<(&'static str, String)>,
    page: String,
    /// The page's Content-Security-Policy: the server's, with the import map allowed by its hash.
    page_policy: String,
}

impl Versions {
    fn of(&self, route: &str) -> Option<&str> {
        self.by_route.iter().find(|(r, _)| *r == route).map(|(_, v)| v.as_str())
    }
}

fn versions() -> &'static Versions {
    static VERSIONS: std::sync::OnceLock<Versions> = std::sync::OnceLock::new();
    VERSIONS.get_or_init(|| {
        let hash = |text: &str| hex_prefix(digest(&SHA256, text.as_bytes()).as_ref());
        let by_route: Vec<(&'static str, String)> =
            ASSETS.iter().filter(|a| a.0 != "/").map(|&(route, _, _, text)| (route, hash(text))).collect();
        let mut page = ASSETS.iter().find(|a| a.0 == "/").map_or("", |a| a.3).to_owned();
        for (route, version) in &by_route {
            for attribute in ["src", "href"] {
                page =
                    page.replace(&format!("{attribute}=\"{route}\""), &format!("{attribute}=\"{route}?v={version}\""));
            }
        }
        let modules: Vec<&(&str, String)> =
            by_route.iter().filter(|(route, _)| route.ends_with(".js") && !route.starts_with("/ui/vendor/")).collect();
        let map: serde_json::Map<String, serde_json::Value> =
            modules.iter().map(|(route, version)| (route.to_string(), format!("{route}?v={version}").into())).collect();
        let import_map = serde_json::json!({ "imports": map }).to_string();
        let map_hash = base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, import_map.as_bytes()));
        let page_policy = crate::guard::CONTENT_SECURITY_POLICY.replacen(
            "script-src 'self'",
            &format!("script-src 'self' 'sha256-{map_hash}'"),
            1,
        );
        let mut head = format!("<script type=\"importmap\">{import_map}</script>\n");
        for (route, version) in &modules {
            head.push_str(&format!("  <link rel=\"modulepreload\" href=\"{route}?v={version}\">\n"));
        }
        head.push_str("  <script type=\"module\"");
        let page = page.replacen("<script type=\"module\"", &head, 1);
        let page_version = hash(&page);
        let mut by_route = by_route;
        by_route.push(("/", page_version));
        Versions { by_route, page, page_policy }
    })
}

/// Whether the request's `If-None-Match` names this tag (or `*`).
fn matches_tag(req: &HttpRequest, tag: &str) -> bool {
    req.headers()
        .get_all(header::IF_NONE_MATCH)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == tag || t.trim() == "*")
}

/// The first 12 bytes of a digest in hex: enough to tell two versions of a file apart.
fn hex_prefix(bytes: &[u8]) -> String {
    bytes.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::{test, App};
    use std::path::{Path, PathBuf};

    /// The `.js` and `.css` files under `dir`, as paths relative to `root` with `/` separators;
    /// the browser tests (and the packages they install) are not part of the UI.
    fn scripts_and_styles(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" && name != "node_modules" {
                    scripts_and_styles(root, &path, out);
                }
            } else if name.ends_with(".js") || name.ends_with(".css") {
                let rel = path.strip_prefix(root).unwrap();
                out.push(rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }

    #[actix_web::test]
    async fn every_script_and_stylesheet_of_the_ui_is_served() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ui");
        let mut files = Vec::new();
        scripts_and_styles(&root, &root, &mut files);
        files.sort();
        assert!(files.iter().any(|f| f == "app.js") && files.iter().any(|f| f.starts_with("views/")), "{files:?}");
        let app = test::init_service(App::new().configure(configure)).await;
        for file in &files {
            let Some(&(route, _, content_type, _)) = ASSETS.iter().find(|a| a.1 == file) else {
                panic!("ui/{file} is not served: add it to ASSETS in ui.rs");
            };
            let want = if file.ends_with(".js") { JS } else { CSS };
            assert_eq!(content_type, want, "ui/{file}");
            let res = test::call_service(&app, test::TestRequest::get().uri(route).to_request()).await;
            assert!(res.status().is_success(), "{route}: {}", res.status());
            assert_eq!(res.headers().get("content-type").unwrap(), want, "{route}");
            assert_eq!(res.headers().get("cache-control").unwrap(), NO_CACHE, "{route}");
            let body = test::read_body(res).await;
            let on_disk = std::fs::read(root.join(file)).unwrap();
            assert!(body == on_disk, "{route} is not ui/{file}");
        }
        // The page names every module by its version, in the import map and a preload link.
        let res = test::call_service(&app, test::TestRequest::get().uri("/").to_request()).await;
        let page = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
        for file in files.iter().filter(|f| f.ends_with(".js") && !f.starts_with("vendor/")) {
            let version = versions().of(&format!("/ui/{file}")).unwrap().to_owned();
            let versioned = format!("/ui/{file}?v={version}");
            assert!(page.contains(&format!("\"/ui/{file}\":\"{versioned}\"")), "the import map lacks {file}: {page}");
            assert!(page.contains(&format!("<link rel=\"modulepreload\" href=\"{versioned}\">")) || file == "app.js");
        }
        assert!(page.find("importmap") < page.find("<script type=\"module\""), "the map comes before the first module");
        // Modules are served where their relative imports point: `/ui/` and their path.
        for &(route, file, content_type, _) in ASSETS {
            if content_type == JS && !file.starts_with("vendor/") {
                assert_eq!(route, format!("/ui/{file}"));
            }
        }
    }

    #[actix_web::test]
    async fn a_file_the_browser_holds_is_answered_304_and_a_versioned_one_is_kept_for_good() {
        let app = test::init_service(App::new().configure(configure)).await;
        let res = test::call_service(&app, test::TestRequest::get().uri("/ui/app.js").to_request()).await;
        let tag = res.headers().get("etag").expect("an ETag").to_str().unwrap().to_owned();
        let again = test::TestRequest::get().uri("/ui/app.js").insert_header(("if-none-match", tag.as_str()));
        let res = test::call_service(&app, again.to_request()).await;
        assert_eq!(res.status(), 304);
        assert!(test::read_body(res).await.is_empty());
        let stale = test::TestRequest::get().uri("/ui/app.js").insert_header(("if-none-match", "\"other\""));
        let res = test::call_service(&app, stale.to_request()).await;
        assert_eq!(res.status(), 200);
        let other = test::TestRequest::get().uri("/ui/charts.js").insert_header(("if-none-match", tag.as_str()));
        assert_eq!(test::call_service(&app, other.to_request()).await.status(), 200, "a tag is one file's");
        let version = versions().of("/ui/lib/api.js").unwrap().to_owned();
        let uri = format!("/ui/lib/api.js?v={version}");
        let res = test::call_service(&app, test::TestRequest::get().uri(&uri).to_request()).await;
        assert_eq!(res.headers().get("cache-control").unwrap(), IMMUTABLE);
        let page = test::call_service(&app, test::TestRequest::get().uri("/").to_request()).await;
        assert_eq!(page.headers().get("cache-control").unwrap(), NO_CACHE, "the page itself is always asked again");
        let policy = page.headers().get("content-security-policy").unwrap().to_str().unwrap().to_owned();
        let page_tag = page.headers().get("etag").unwrap().to_str().unwrap().to_owned();
        let again = test::TestRequest::get().uri("/").insert_header(("if-none-match", page_tag.as_str()));
        assert_eq!(
            test::call_service(&app, again.to_request()).await.status(),
            200,
            "the page is sent whole, with its policy"
        );
        let page = String::from_utf8(test::read_body(page).await.to_vec()).unwrap();
        assert!(page.contains(&format!("href=\"/ui/app.css?v={}\"", versions().of("/ui/app.css").unwrap())), "{page}");
        // The import map is the page's one inline script, allowed by its hash.
        let map =
            page.split("<script type=\"importmap\">").nth(1).and_then(|rest| rest.split("</script>").next()).unwrap();
        let hash = base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, map.as_bytes()));
        assert!(policy.contains(&format!("script-src 'self' 'sha256-{hash}'")), "{policy}");
    }

    /// The UI draws a run in the colour the server gave it and, where two lines of a chart share
    /// one, moves the later to the palette's next free colour: both must hold the same palette.
    #[actix_web::test]
    async fn the_ui_and_the_server_hold_the_same_run_palette() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ui/lib/colors.js");
        let text = std::fs::read_to_string(root).unwrap();
        let list = text.split("RUN_PALETTE = [").nth(1).and_then(|rest| rest.split(']').next()).unwrap();
        let ui: Vec<String> = list.split(',').map(|c| c.trim().trim_matches('\'').to_owned()).collect();
        assert_eq!(ui, trainlog_schema::RUN_PALETTE.iter().map(|c| c.to_string()).collect::<Vec<_>>());
    }
}
