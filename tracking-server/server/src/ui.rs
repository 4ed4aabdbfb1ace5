//! The comparison UI: its files (from `ui/`) are embedded in the binary and served at `/`, so
//! running it needs nothing but the server. With `TRAINLOG_UI_DIR` set to a checkout's `ui/`
//! folder, the files are read from there on each request instead, for working on the UI
//! without rebuilding.

use actix_web::{web, HttpResponse};

/// Each served file: its URL path, its path under `ui/`, its content type and its embedded text.
const ASSETS: &[(&str, &str, &str, &str)] = &[
    ("/", "index.html", "text/html; charset=utf-8", include_str!("../../../ui/index.html")),
    ("/ui/app.js", "app.js", JS, include_str!("../../../ui/app.js")),
    ("/ui/charts.js", "charts.js", JS, include_str!("../../../ui/charts.js")),
    ("/ui/app.css", "app.css", CSS, include_str!("../../../ui/app.css")),
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
    ("/ui/favicon.svg", "favicon.svg", SVG, include_str!("../../../ui/favicon.svg")),
    ("/favicon.ico", "favicon.svg", SVG, include_str!("../../../ui/favicon.svg")),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

pub fn configure(cfg: &mut web::ServiceConfig) {
    let from_disk = std::env::var_os("TRAINLOG_UI_DIR").map(std::path::PathBuf::from);
    for &(route, file, content_type, embedded) in ASSETS {
        let path = from_disk.as_ref().map(|dir| dir.join(file));
        cfg.route(
            route,
            web::get().to(move || {
                let path = path.clone();
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
                        None => embedded.to_owned(),
                    };
                    HttpResponse::Ok()
                        .content_type(content_type)
                        .insert_header(("cache-control", "no-cache"))
                        .body(body)
                }
            }),
        );
    }
}
