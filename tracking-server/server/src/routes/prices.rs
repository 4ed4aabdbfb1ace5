//! The installation's price catalog (`/prices`): instance prices from a catalog and the
//! installation's own rates per GPU-hour, each valid from a date. Anyone may read them; adding
//! them is for server admins. A node is priced with them when it joins.

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::query::{query_int, query_pairs};
use crate::state::{meta, State};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use trainlog_meta::prices::{PriceKind, PriceRow};
use trainlog_schema::limits::{check_len, MAX_NAME_CHARS};
use utoipa::ToSchema;

/// Rows one request may add.
const MAX_ROWS: usize = 10_000;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/prices", web::get().to(list_prices));
    cfg.route("/prices", web::post().to(add_prices));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_prices, add_prices))]
pub(super) struct Api;

/// instance: a cloud instance type's price per hour; rate: the installation's own price per
/// GPU-hour for a GPU model and/or a cluster.
#[derive(Deserialize, Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum KindText {
    Instance,
    Rate,
}

/// One price. Empty texts mean any.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceView {
    pub kind: KindText,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub cloud: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub instance_type: String,
    /// The GPU model (a catalog's AcceleratorName: H100, A100-80GB, …).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub accelerator: String,
    #[serde(default)]
    pub accelerator_count: f64,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub region: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub zone: String,
    /// A rate's cluster (Slurm's or SkyPilot's cluster name).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub cluster: String,
    /// An instance's on-demand price per hour, or a rate's price per GPU-hour, USD.
    pub usd_per_hour: Option<f64>,
    /// An instance's spot price per hour, USD.
    pub spot_usd_per_hour: Option<f64>,
    /// The price holds from this instant (ms since the Unix epoch) until a newer row of its key.
    pub valid_from: i64,
    /// Where the price comes from.
    #[schema(max_length = 500)]
    pub source: String,
}

impl PriceView {
    fn into_row(self, i: usize) -> Result<PriceRow> {
        for (name, text) in [
            ("cloud", &self.cloud),
            ("instance_type", &self.instance_type),
            ("accelerator", &self.accelerator),
            ("region", &self.region),
            ("zone", &self.zone),
            ("cluster", &self.cluster),
            ("source", &self.source),
        ] {
            check_len(&format!("rows[{i}].{name}"), "a price's text", text, MAX_NAME_CHARS)?;
        }
        Ok(PriceRow {
            kind: match self.kind {
                KindText::Instance => PriceKind::Instance,
                KindText::Rate => PriceKind::Rate,
            },
            cloud: self.cloud.trim().to_ascii_lowercase(),
            instance_type: self.instance_type.trim().to_owned(),
            accelerator: self.accelerator.trim().to_owned(),
            accelerator_count: self.accelerator_count,
            region: self.region.trim().to_owned(),
            zone: self.zone.trim().to_owned(),
            cluster: self.cluster.trim().to_owned(),
            usd_per_hour: self.usd_per_hour,
            spot_usd_per_hour: self.spot_usd_per_hour,
            valid_from_ms: self.valid_from,
            source: self.source,
        })
    }

    fn new(r: PriceRow) -> Self {
        PriceView {
            kind: match r.kind {
                PriceKind::Instance => KindText::Instance,
                PriceKind::Rate => KindText::Rate,
            },
            cloud: r.cloud,
            instance_type: r.instance_type,
            accelerator: r.accelerator,
            accelerator_count: r.accelerator_count,
            region: r.region,
            zone: r.zone,
            cluster: r.cluster,
            usd_per_hour: r.usd_per_hour,
            spot_usd_per_hour: r.spot_usd_per_hour,
            valid_from: r.valid_from_ms,
            source: r.source,
        }
    }
}

/// Prices to add.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddPrices {
    #[schema(max_items = 10000)]
    pub rows: Vec<PriceView>,
}

/// The stored prices.
#[derive(Serialize, ToSchema)]
pub struct PriceList {
    pub rows: Vec<PriceView>,
}

/// Prices added.
#[derive(Serialize, ToSchema)]
pub struct PricesAdded {
    pub added: usize,
}

/// The installation's prices: every row, or with `at` the ones valid then.
#[utoipa::path(get, path = "/api/v1/prices", tag = "report",
    params(("at" = Option<i64>, Query, description = "Only the rows valid at this instant, ms since the Unix epoch.")),
    responses((status = 200, description = "The prices.", body = PriceList)))]
pub(crate) async fn list_prices(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let at = query_int::<i64>(&query_pairs(&req)?, "at")?;
    let rows = meta(&state, move |m| m.prices(at)).await?;
    Ok(HttpResponse::Ok().json(PriceList { rows: rows.into_iter().map(PriceView::new).collect() }))
}

/// Add prices (server admins): a row with the key and date of a stored one replaces it; all or
/// none. Nodes that join afterwards are priced with them, by the date their attempt started.
#[utoipa::path(post, path = "/api/v1/prices", tag = "report", request_body = AddPrices,
    responses((status = 201, description = "Added.", body = PricesAdded)))]
pub(crate) async fn add_prices(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "setting prices")?;
    let body: AddPrices = json_body(&req, payload).await?;
    if body.rows.len() > MAX_ROWS {
        return Err(ApiError::invalid("rows", format!("at most {MAX_ROWS} rows a request")));
    }
    let rows = body.rows.into_iter().enumerate().map(|(i, r)| r.into_row(i)).collect::<Result<Vec<_>>>()?;
    let added = meta(&state, move |m| m.import_prices(&rows)).await?;
    Ok(HttpResponse::Created().json(PricesAdded { added }))
}
