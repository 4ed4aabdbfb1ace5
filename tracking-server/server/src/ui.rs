//! The comparison UI: its files (from `ui/`) are embedded in the binary and served at `/`, so
//! running it needs nothing but the server.

use actix_web::{web, HttpResponse};

const INDEX_HTML: &str = include_str!("../../../ui/index.html");
const APP_JS: &str = include_str!("../../../ui/app.js");
const CHARTS_JS: &str = include_str!("../../../ui/charts.js");
const APP_CSS: &str = include_str!("../../../ui/app.css");

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route("/ui/app.js", web::get().to(|| asset("text/javascript; charset=utf-8", APP_JS)))
        .route("/ui/charts.js", web::get().to(|| asset("text/javascript; charset=utf-8", CHARTS_JS)))
        .route("/ui/app.css", web::get().to(|| asset("text/css; charset=utf-8", APP_CSS)));
}

async fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok().content_type(content_type).insert_header(("cache-control", "no-cache")).body(body)
}
