//! The route table: every resource's routes under `/api/v1`, MLflow's under its own prefixes,
//! `/metrics`, and the answer for a path or method no route takes. A resource is a module here
//! holding its handlers and its wire types together.

mod alerts;
mod artifacts;
mod logs;
mod media;
mod metrics;
mod mlflow;
pub(crate) mod openapi;
mod prices;
mod projects;
mod registry;
pub(crate) mod report;
mod runs;
mod sweeps;
mod system;
mod team;
mod views;

use crate::error::ApiError;
use actix_web::{web, HttpRequest, HttpResponse};
pub use metrics::{set_max_query_points, MAX_QUERY_POINTS};

pub fn configure(cfg: &mut web::ServiceConfig) {
    mlflow::configure(cfg);
    cfg.route("/metrics", web::get().to(system::prometheus::prometheus));
    cfg.service(
        web::scope("/api/v1")
            .configure(system::configure)
            .configure(openapi::configure)
            .configure(projects::configure)
            .configure(alerts::configure)
            .configure(prices::configure)
            .configure(runs::configure)
            .configure(metrics::configure)
            .configure(logs::configure)
            .configure(media::configure)
            .configure(artifacts::configure)
            .configure(registry::configure)
            .configure(report::configure)
            .configure(sweeps::configure)
            .configure(team::configure)
            .configure(views::configure),
    )
    .default_service(web::to(|req: HttpRequest| async move {
        Err::<HttpResponse, _>(match openapi::allowed_methods(crate::guard::routed_path(&req)) {
            Some(allow) => ApiError::MethodNotAllowed { method: req.method().to_string(), allow },
            None => ApiError::NotFound(format!("route {} {}", req.method(), crate::guard::routed_path(&req))),
        })
    }));
}
