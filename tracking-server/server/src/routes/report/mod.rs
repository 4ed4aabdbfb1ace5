//! The training report (`GET /report`): what the runs a caller may read cost, how busy their
//! GPUs were, how long they queued and how often they failed for reasons that were not their
//! code, for any projects, users, groups, tags, filter and period, grouped as asked.
//!
//! Before answering, the runs whose row of the report is missing or older than the run are
//! computed again (`report_rows`), up to a limit; the rest are counted in `pending_runs`. Then
//! the scope's days whose sums are out of date are added up again, up to a limit; while any is
//! left, the answer adds up the runs themselves.

mod budgets;
mod wire;

use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_pairs};
use crate::report_rows;
use crate::state::{meta, State};
use actix_web::{web, HttpRequest, HttpResponse};
use trainlog_meta::report::{Breakdown, ReportRequest, DEFAULT_THRESHOLD};
use trainlog_meta::search::RunScope;
use trainlog_meta::{Role, Scope, Visibility};
use trainlog_schema::limits::{check_len, MAX_QUERY_FILTER_CHARS};
pub use wire::ReportView;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/report", web::get().to(report))
        .route("/projects/{name}/budget", web::get().to(budgets::get_budget))
        .route("/projects/{name}/budget", web::put().to(budgets::put_budget));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(report, budgets::get_budget, budgets::put_budget), modifiers(&Definitions))]
pub(super) struct Api;

/// Writes each figure's definition (the one the answers carry) into the document's `GroupView`.
struct Definitions;

impl utoipa::Modify for Definitions {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{schema::Schema, RefOr};
        let Some(components) = doc.components.as_mut() else { return };
        let Some(RefOr::T(Schema::Object(group))) = components.schemas.get_mut("GroupView") else { return };
        for (name, text) in trainlog_meta::report::definitions(DEFAULT_THRESHOLD) {
            if let Some(RefOr::T(Schema::Object(property))) = group.properties.get_mut(name) {
                property.description = Some(text);
            }
        }
    }
}

/// A list parameter: every value of `name`, each split at commas, blanks dropped.
fn list(pairs: &[(String, String)], name: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(k, _)| k == name)
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A string literal of the search grammar.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// An instant: ms since the epoch, a date (`2026-10-01`, UTC midnight), an RFC 3339 time, or a
/// span back from now (`30d`, `12h`, `4w`).
pub fn parse_instant(field: &str, text: &str, now_ms: i64) -> Result<i64> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let unit = |u: char| match u {
        'm' => Some(60_000),
        'h' => Some(3_600_000),
        'd' => Some(86_400_000),
        'w' => Some(7 * 86_400_000),
        _ => None,
    };
    if let Some(last) = text.chars().last() {
        if let (Some(ms), Ok(n)) = (unit(last), text[..text.len() - last.len_utf8()].parse::<i64>()) {
            if n >= 0 {
                return Ok(now_ms - n.saturating_mul(ms));
            }
        }
    }
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(text, &Rfc3339) {
        return Ok((t.unix_timestamp_nanos() / 1_000_000) as i64);
    }
    let date_format = time::macros::format_description!("[year]-[month]-[day]");
    if let Ok(d) = time::Date::parse(text, &date_format) {
        return Ok(d.midnight().assume_utc().unix_timestamp() * 1000);
    }
    Err(ApiError::invalid(
        field,
        format!("expected ms since the epoch, a date (2026-10-01), an RFC 3339 time or a span back from now (30d, 12h, 4w), got {text:?}"),
    ))
}

/// The run-search filter the named filters add up to, with the caller's own `filter`.
fn filter_of(pairs: &[(String, String)]) -> Result<String> {
    let mut terms = Vec::new();
    for (param, attribute) in [("users", "user"), ("groups", "group")] {
        let values = list(pairs, param);
        if !values.is_empty() {
            let values: Vec<String> = values.iter().map(|v| quoted(v)).collect();
            terms.push(format!("{attribute} in ({})", values.join(", ")));
        }
    }
    for tag in list(pairs, "tags") {
        let Some((key, value)) = tag.split_once(':').or_else(|| tag.split_once('=')) else {
            return Err(ApiError::invalid("tags", format!("expected KEY:VALUE, got {tag:?}")));
        };
        terms.push(format!("tags.`{}` = {}", key.replace('`', "``"), quoted(value)));
    }
    if let Some(filter) = pairs.iter().find(|(k, _)| k == "filter").map(|(_, v)| v.trim()).filter(|f| !f.is_empty()) {
        check_len("filter", "a filter", filter, MAX_QUERY_FILTER_CHARS)?;
        terms.push(format!("({filter})"));
    }
    Ok(terms.join(" and "))
}

/// The training report over the runs the caller may read.
#[utoipa::path(get, path = "/api/v1/report", tag = "report",
    params(
        ("projects" = Option<String>, Query, description = "Project names, comma-separated (all the caller may read by default)."),
        ("users" = Option<String>, Query, description = "Users who ran the runs, comma-separated."),
        ("groups" = Option<String>, Query, description = "Run groups, comma-separated."),
        ("tags" = Option<String>, Query, description = "KEY:VALUE tags the runs carry, comma-separated (all of them)."),
        ("filter" = Option<String>, Query, description = "A run-search filter, as `POST /runs/search` takes."),
        ("since" = Option<String>, Query, description = "Runs that started at or after: ms since the epoch, a date (2026-10-01, UTC), an RFC 3339 time, or a span back from now (30d, 12h, 4w)."),
        ("until" = Option<String>, Query, description = "Runs that started before this instant (same forms); now by default."),
        ("by" = Option<String>, Query, description = "Groups: one or two of project, user, group, tag:KEY, gpu, provider, pricing (spot, on_demand or mixed), week, day, separated by a comma (project,week); one group of everything by default."),
        ("active_above" = Option<u32>, Query, description = "A GPU-second is active when its utilization sample is above this percent: a multiple of 5 from 0 to 95 (default 10)."),
    ),
    responses((status = 200, description = "The report: each group's figures, the total and the runs behind them.", body = ReportView)))]
pub(crate) async fn report(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let now = trainlog_meta::now_ms();
    let projects = list(&pairs, "projects");
    let scope = if projects.is_empty() {
        match crate::auth::visibility(&req, Scope::Project).await? {
            Visibility::All => RunScope::All,
            Visibility::Only(ids) => RunScope::Projects(ids),
            Visibility::AllBut(ids) => RunScope::AllBut(ids),
        }
    } else {
        let mut ids = Vec::with_capacity(projects.len());
        for name in projects {
            ids.push(lookup::project(&state, &req, name, Role::Read).await?.id);
        }
        RunScope::Projects(ids)
    };
    // An empty value is no value, as for the list parameters.
    let one =
        |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.trim().is_empty());
    let since = one("since").map(|t| parse_instant("since", t, now)).transpose()?;
    let until = one("until").map(|t| parse_instant("until", t, now)).transpose()?;
    if let (Some(s), Some(u)) = (since, until) {
        if s >= u {
            return Err(ApiError::invalid("until", "the period ends after it starts"));
        }
    }
    let by = Breakdown::parse_list(one("by").unwrap_or(""))?;
    let threshold = query_int::<u32>(&pairs, "active_above")?.unwrap_or(DEFAULT_THRESHOLD);
    let request = ReportRequest {
        scope: scope.clone(),
        filter: filter_of(&pairs)?,
        since_ms: since,
        until_ms: until,
        by: by.clone(),
        threshold,
        now_ms: now,
        rollup: false,
    };
    let pending = report_rows::refresh(&state, &request).await?;
    let days_scope = scope.clone();
    let days_left = meta(&state, move |m| m.refresh_rollup(&days_scope, report_rows::DAYS_LIMIT)).await?;
    let request = ReportRequest { rollup: days_left == 0, ..request };
    let report = meta(&state, move |m| m.report(&request)).await?;
    let budgets = budgets::budgets(&state, scope, now).await?;
    Ok(HttpResponse::Ok().json(ReportView::new(report, pending, Breakdown::list_name(&by), threshold, budgets)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_every_form() {
        let now = 1_790_000_000_000;
        assert_eq!(parse_instant("since", "1700000000000", now).unwrap(), 1_700_000_000_000);
        assert_eq!(parse_instant("since", "30d", now).unwrap(), now - 30 * 86_400_000);
        assert_eq!(parse_instant("since", "4w", now).unwrap(), now - 28 * 86_400_000);
        assert_eq!(parse_instant("since", "2026-10-01", now).unwrap(), 1_790_812_800_000);
        assert_eq!(parse_instant("since", "2026-10-01T01:00:00Z", now).unwrap(), 1_790_816_400_000);
        assert!(parse_instant("since", "yesterday", now).is_err());
        assert!(parse_instant("since", "-3d", now).is_err());
    }

    #[test]
    fn named_filters_become_one_search_filter() {
        let pairs: Vec<(String, String)> =
            [("users", "ana, o'neil"), ("tags", "team:vision"), ("tags", "odd`key=x"), ("filter", "metrics.loss < 1")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(
            filter_of(&pairs).unwrap(),
            "user in ('ana', 'o''neil') and tags.`team` = 'vision' and tags.`odd``key` = 'x' and (metrics.loss < 1)"
        );
        assert!(filter_of(&[("tags".into(), "novalue".into())]).is_err());
    }
}
