//! A project's monthly budget (`/projects/{name}/budget`): reading it with this month's spend
//! needs read on the project, setting it needs admin.

use crate::body::json_body;
use crate::error::Result;
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::NameText;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use trainlog_meta::report::BudgetSpend;
use trainlog_meta::search::RunScope;
use trainlog_meta::Role;
use utoipa::ToSchema;

/// A project's budget and what its runs spent against it this month.
#[derive(Serialize, ToSchema)]
pub struct BudgetView {
    pub project: String,
    /// USD per calendar month (UTC); null when the project has none.
    pub monthly_usd: Option<f64>,
    /// The month, YYYY-MM.
    pub month: String,
    /// The cost of the priced runs that started this month.
    pub spent_usd: f64,
    /// spent_usd / monthly_usd; null without a budget, or with a budget of 0.
    pub used: Option<f64>,
    /// Runs of the month with no price, left out of spent_usd.
    pub unpriced_runs: i64,
}

impl From<BudgetSpend> for BudgetView {
    fn from(b: BudgetSpend) -> Self {
        BudgetView {
            used: (b.monthly_usd > 0.0).then(|| b.spent_usd / b.monthly_usd),
            project: b.project,
            monthly_usd: Some(b.monthly_usd),
            month: b.month,
            spent_usd: b.spent_usd,
            unpriced_runs: b.unpriced_runs,
        }
    }
}

/// A project's new budget.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBudget {
    /// USD per calendar month (UTC); null removes the budget.
    #[schema(minimum = 0)]
    pub monthly_usd: Option<f64>,
}

/// The projects' budgets with this month's spend, for the projects in `scope`, their rows first
/// brought up to date.
pub async fn budgets(state: &State, scope: RunScope, now: i64) -> Result<Vec<BudgetView>> {
    let rows = crate::report_rows::budget_spend(state, scope, now).await?;
    Ok(rows.into_iter().map(BudgetView::from).collect())
}

async fn project_budget(state: &State, project: trainlog_meta::Project) -> Result<BudgetView> {
    let now = trainlog_meta::now_ms();
    let (_, _, month) = trainlog_meta::report::month_of(now);
    let listed = budgets(state, RunScope::Project(project.id), now).await?;
    Ok(listed.into_iter().next().unwrap_or(BudgetView {
        project: project.name,
        monthly_usd: None,
        month,
        spent_usd: 0.0,
        used: None,
        unpriced_runs: 0,
    }))
}

/// A project's monthly budget and this month's spend against it.
#[utoipa::path(get, path = "/api/v1/projects/{name}/budget", tag = "report",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The budget and this month's spend.", body = BudgetView)))]
pub(crate) async fn get_budget(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    Ok(HttpResponse::Ok().json(project_budget(&state, project).await?))
}

/// Set or remove a project's monthly budget (admin of the project).
#[utoipa::path(put, path = "/api/v1/projects/{name}/budget", tag = "report",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    request_body = SetBudget,
    responses((status = 200, description = "The budget and this month's spend.", body = BudgetView)))]
pub(crate) async fn put_budget(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: SetBudget = json_body(&req, payload).await?;
    let project = lookup::project(&state, &req, path.into_inner(), Role::Admin).await?;
    let id = project.id;
    meta(&state, move |m| m.set_budget(id, body.monthly_usd)).await?;
    Ok(HttpResponse::Ok().json(project_budget(&state, project).await?))
}
