//! The comparison UI: its files (from `ui/`) are embedded in the binary and served at `/`, so
//! running it needs nothing but the server.

use actix_web::{web, HttpResponse};

const INDEX_HTML: &str = include_str!("../../../ui/index.html");
const APP_JS: &str = include_str!("../../../ui/app.js");
const CHARTS_JS: &str = include_str!("../../../ui/charts.js");
const APP_CSS: &str = include_str!("../../../ui/app.css");
const FAVICON_SVG: &str = include_str!("../../../ui/favicon.svg");
const UPLOT_JS: &str = include_str!("../../../ui/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../ui/vendor/uplot/uPlot.min.css");

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route("/ui/app.js", web::get().to(|| asset(JS, APP_JS)))
        .route("/ui/charts.js", web::get().to(|| asset(JS, CHARTS_JS)))
        .route("/ui/app.css", web::get().to(|| asset(CSS, APP_CSS)))
        .route("/ui/vendor/uPlot.iife.min.js", web::get().to(|| asset(JS, UPLOT_JS)))
        .route("/ui/vendor/uPlot.min.css", web::get().to(|| asset(CSS, UPLOT_CSS)))
        .route("/ui/favicon.svg", web::get().to(|| asset(SVG, FAVICON_SVG)))
        .route("/favicon.ico", web::get().to(|| asset(SVG, FAVICON_SVG)));
}

async fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok().content_type(content_type).insert_header(("cache-control", "no-cache")).body(body)
}
