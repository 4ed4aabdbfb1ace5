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
use ring::digest::{digest, SHA256};

/// A file of `ui/` served at `/ui/` followed by its path, with its content type and embedded text.
macro_rules! ui_file {
    ($path:literal, $content_type:expr) => {
        (concat!("/ui/", $path), $path, $content_type, include_str!(concat!("../../../ui/", $path)))
    };
}

/// Each served file: its URL path, its path under `ui/`, its content type and its embedded text.
const ASSETS: &[(&str, &str, &str, &str)] = &[
    ("/", "index.html", "text/html; charset=utf-8", include_str!("../../../ui/index.html")),
    ui_file!("app.css", CSS),
    // The entry module (the router), and the modules it imports.
    ui_file!("app.js", JS),
    ui_file!("charts.js", JS),
    ui_file!("lib/address.js", JS),
    ui_file!("lib/api.js", JS),
    ui_file!("lib/bars.js", JS),
    ui_file!("lib/chart-axes.js", JS),
    ui_file!("lib/chart-export.js", JS),
    ui_file!("lib/colors.js", JS),
    ui_file!("lib/dom.js", JS),
    ui_file!("lib/downloads.js", JS),
    ui_file!("lib/format.js", JS),
    ui_file!("lib/parcoords.js", JS),
    ui_file!("lib/runs.js", JS),
    ui_file!("lib/session.js", JS),
    ui_file!("views/compare.js", JS),
    ui_file!("views/cost-panel.js", JS),
    ui_file!("views/models.js", JS),
    ui_file!("views/projects.js", JS),
    ui_file!("views/run-artifacts.js", JS),
    ui_file!("views/run.js", JS),
    ui_file!("views/runs-columns.js", JS),
    ui_file!("views/runs-filter.js", JS),
    ui_file!("views/runs-table.js", JS),
    ui_file!("views/sweeps.js", JS),
    (
        "/ui/vendor/uPlot.iife.min.js",
        "vendor/uplot/uPlot.iife.min.js",
        JS,
        include_str!("../../../ui/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "/ui/vendor/uPlot.min.css",
        "vendor/uplot/uPlot.min.css",
        CSS,
        include_str!("../../../ui/vendor/uplot/uPlot.min.css"),
    ),
    ui_file!("favicon.svg", SVG),
    ("/favicon.ico", "favicon.svg", SVG, include_str!("../../../ui/favicon.svg")),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

pub fn configure(cfg: &mut web::ServiceConfig) {
    let from_disk = std::env::var_os("TRAINLOG_UI_DIR").map(std::path::PathBuf::from);
    for &(route, file, content_type, embedded) in ASSETS {
        let path = from_disk.as_ref().map(|dir| dir.join(file));
        // An embedded file never changes while the server runs: a page load revalidates each one
        // with its tag and gets an empty 304, rather than the whole file again.
        let tag = format!("\"{}\"", hex_prefix(digest(&SHA256, embedded.as_bytes()).as_ref()));
        cfg.route(
            route,
            web::get().to(move |req: HttpRequest| {
                let (path, tag) = (path.clone(), tag.clone());
                async move {
                    let body = match path {
                        Some(path) => match tokio::fs::read_to_string(&path).await {
                            Ok(text) => text,
                            Err(e) => {
                                return HttpResponse::NotFound()
                                    .content_type("text/plain; charset=utf-8")
                                    .body(format!("{}: {e}", path.display()))
                            }
                        },
                        None if matches_tag(&req, &tag) => {
                            return HttpResponse::NotModified()
                                .insert_header((header::ETAG, tag))
                                .insert_header((header::CACHE_CONTROL, "no-cache"))
                                .finish()
                        }
                        None => {
                            return HttpResponse::Ok()
                                .content_type(content_type)
                                .insert_header((header::ETAG, tag))
                                .insert_header((header::CACHE_CONTROL, "no-cache"))
                                .body(embedded)
                        }
                    };
                    HttpResponse::Ok()
                        .content_type(content_type)
                        .insert_header((header::CACHE_CONTROL, "no-cache"))
                        .body(body)
                }
            }),
        );
    }
}

/// Whether the request's `If-None-Match` names this tag (or `*`).
fn matches_tag(req: &HttpRequest, tag: &str) -> bool {
    req.headers()
        .get_all(header::IF_NONE_MATCH)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == tag || t.trim() == "*")
}

/// The first 16 bytes of a digest in hex: enough to tell two versions of a file apart.
fn hex_prefix(bytes: &[u8]) -> String {
    bytes.iter().take(16).map(|b| format!("{b:02x}")).collect()
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
            assert_eq!(res.headers().get("cache-control").unwrap(), "no-cache", "{route}");
            let body = test::read_body(res).await;
            let on_disk = std::fs::read(root.join(file)).unwrap();
            assert!(body == on_disk, "{route} is not ui/{file}");
        }
        // The page asks for every module at once, rather than as each import is found.
        let index = std::fs::read_to_string(root.join("index.html")).unwrap();
        for file in files.iter().filter(|f| f.ends_with(".js")) {
            let preload = format!("<link rel=\"modulepreload\" href=\"/ui/{file}\">");
            let module = file != "app.js" && !file.starts_with("vendor/");
            assert!(!module || index.contains(&preload), "index.html lacks {preload}");
        }
        // Modules are served where their relative imports point: `/ui/` and their path.
        for &(route, file, content_type, _) in ASSETS {
            if content_type == JS && !file.starts_with("vendor/") {
                assert_eq!(route, format!("/ui/{file}"));
            }
        }
    }

    #[actix_web::test]
    async fn a_file_the_browser_holds_is_answered_304_by_its_tag() {
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
    }
}
