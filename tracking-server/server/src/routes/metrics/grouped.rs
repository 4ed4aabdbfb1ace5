//! `POST /metrics/query`: one metric of many runs, by run or by group. A group's runs are
//! bucketed on one step grid over their extents, each run read once whatever its groups.

use super::{wire, GROUP_POINTS_KEPT, SERIES_READS_IN_FLIGHT};
use crate::body::json_body_within;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::respond::json_answer;
use crate::state::State;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use trainlog_schema::limits::{check_len, MAX_NAME_CHARS};
use trainlog_schema::RunId;
use trainlog_store::StepRange;

/// The largest body of a query: 20,000 run ids of 64 characters, quoted, and the names of 100
/// groups take less than half of it.
pub const MAX_QUERY_BODY_BYTES: usize = 4 << 20;

/// One metric of many runs, by run (as `GET /metrics`, with up to 20,000 ids, each answered once)
/// or by group: each group's runs bucketed on one step grid, with the mean of their last values,
/// their min and max, and how many runs each bucket holds. The body is at most 4 MiB.
#[utoipa::path(post, path = "/api/v1/metrics/query", tag = "metrics", request_body = wire::MetricsQuery,
    responses((status = 200, description = "With `runs`, the series in the order given, as `GET /metrics` answers them; with `groups`, the groups in the order given.",
        body = wire::MetricsQueryAnswer)))]
pub(crate) async fn query_metrics(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    use trainlog_schema::limits::{MAX_QUERY_BUCKETS, MAX_QUERY_GROUPS, MAX_QUERY_RUNS};
    let body: wire::MetricsQuery = json_body_within(&req, payload, MAX_QUERY_BODY_BYTES).await?;
    let key = body.key.as_deref().ok_or_else(|| ApiError::invalid("key", "the metric's key is required"))?;
    let key = trainlog_schema::MetricKey::parse("key", key)?;
    let n = body.buckets.ok_or_else(|| ApiError::invalid("buckets", "the number of buckets is required"))?;
    if n == 0 || n > 100_000 {
        return Err(ApiError::invalid("buckets", "expected 1 to 100000"));
    }
    let too_many_buckets = |what: &str, count: usize| {
        ApiError::invalid(
            "buckets",
            format!(
                "{count} {what} × {n} buckets is more than the {MAX_QUERY_BUCKETS} buckets an answer may hold; ask for fewer"
            ),
        )
    };
    let range = StepRange { min: body.step_min, max: body.step_max };
    let groups = match (body.runs, body.groups) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("groups", "give runs or groups, not both")),
        (None, None) => return Err(ApiError::invalid("runs", "give runs (run ids) or groups (run ids by group name)")),
        (None, Some(groups)) => groups.0,
        (Some(runs), None) => {
            if runs.is_empty() || runs.len() > MAX_QUERY_RUNS {
                return Err(ApiError::invalid(
                    "runs",
                    format!("give 1 to {MAX_QUERY_RUNS} run ids, got {}", runs.len()),
                ));
            }
            // A run named twice is read and answered once, in the place it was first named.
            let ids = super::distinct_ids(runs.iter().map(|s| lookup::run_id(s)).collect::<Result<_>>()?);
            if ids.len().saturating_mul(n) > MAX_QUERY_BUCKETS {
                return Err(too_many_buckets("runs", ids.len()));
            }
            lookup::readable_runs(&state, &req, &ids).await?;
            super::check_points_budget(&state, &ids, &key, super::max_query_points()).await?;
            let buckets: Vec<Vec<trainlog_store::Bucket>> = futures::stream::iter(ids.iter().map(|id| {
                let (state, key) = (&state, &key);
                async move {
                    let series = state.store.series(id, key, range).await?;
                    Ok::<_, ApiError>(web::block(move || series.downsample(n)).await?)
                }
            }))
            .buffered(SERIES_READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
            let answer = wire::MetricsQueryAnswer::Runs(wire::MultiRunSeries {
                key: key.as_str(),
                series: ids
                    .iter()
                    .zip(buckets)
                    .map(|(id, b)| wire::RunSeries {
                        run_id: id.as_str(),
                        body: wire::SeriesBody { points: None, buckets: Some(wire::Buckets(b)) },
                    })
                    .collect(),
            });
            return json_answer(&answer);
        }
    };
    if groups.is_empty() || groups.len() > MAX_QUERY_GROUPS {
        return Err(ApiError::invalid("groups", format!("give 1 to {MAX_QUERY_GROUPS} groups, got {}", groups.len())));
    }
    let total: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
    if total > MAX_QUERY_RUNS {
        return Err(ApiError::invalid(
            "groups",
            format!("the groups may hold {MAX_QUERY_RUNS} run ids in all, got {total}"),
        ));
    }
    if groups.len().saturating_mul(n) > MAX_QUERY_BUCKETS {
        return Err(too_many_buckets("groups", groups.len()));
    }
    for (name, _) in &groups {
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "groups",
                format!("a group's name is 1 or more characters, none of them control characters: {name:?}"),
            ));
        }
        check_len("groups", "a group's name", name, MAX_NAME_CHARS)?;
    }
    // Each run is read once, whatever the groups it is in.
    let mut distinct: Vec<RunId> = Vec::new();
    let mut index: std::collections::HashMap<RunId, usize> = std::collections::HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::with_capacity(groups.len());
    for (_, ids) in &groups {
        let mut m = Vec::with_capacity(ids.len());
        for raw in ids {
            let id = lookup::run_id(raw)?;
            let next = distinct.len();
            let i = *index.entry(id.clone()).or_insert(next);
            if i == next {
                distinct.push(id);
            }
            m.push(i);
        }
        m.sort_unstable();
        m.dedup();
        members.push(m);
    }
    lookup::readable_runs(&state, &req, &distinct).await?;
    super::check_points_budget(&state, &distinct, &key, super::max_query_points()).await?;
    let mut groups_of: Vec<Vec<usize>> = vec![Vec::new(); distinct.len()];
    for (g, m) in members.iter().enumerate() {
        for &i in m {
            groups_of[i].push(g);
        }
    }
    // First the step extent of every run, keeping the series while they fit the budget; then
    // each group's grid over its runs' extents, and every run's points on its groups' grids.
    let mut extents: Vec<Option<(i64, i64)>> = Vec::with_capacity(distinct.len());
    let mut kept: Vec<Option<trainlog_store::Series>> = Vec::with_capacity(distinct.len());
    let mut kept_points = 0usize;
    {
        let mut reads = futures::stream::iter(distinct.iter().map(|id| state.store.series(id, &key, range)))
            .buffered(SERIES_READS_IN_FLIGHT);
        while let Some(series) = reads.next().await {
            let series = series?;
            let extent = series.steps.first().copied().zip(series.steps.last().copied());
            extents.push(extent);
            if extent.is_some() && kept_points + series.len() <= GROUP_POINTS_KEPT {
                kept_points += series.len();
                kept.push(Some(series));
            } else {
                kept.push(None);
            }
        }
    }
    let mut grids: Vec<Option<trainlog_store::GroupBuckets>> = members
        .iter()
        .map(|m| trainlog_store::StepGrid::over(m.iter().filter_map(|&i| extents[i]), n))
        .map(|grid| grid.map(trainlog_store::GroupBuckets::new))
        .collect();
    // Points are added to the grids on the blocking pool, the kept series in one call and each
    // series read again in one: the workers keep answering other requests.
    let groups_of = std::sync::Arc::new(groups_of);
    let add = |mut grids: Vec<Option<trainlog_store::GroupBuckets>>, series: Vec<(usize, trainlog_store::Series)>| {
        let groups_of = groups_of.clone();
        web::block(move || {
            for (i, series) in &series {
                for &g in &groups_of[*i] {
                    if let Some(grid) = grids[g].as_mut() {
                        grid.add(series);
                    }
                }
            }
            grids
        })
    };
    let again: Vec<usize> = (0..distinct.len()).filter(|&i| extents[i].is_some() && kept[i].is_none()).collect();
    let kept: Vec<(usize, trainlog_store::Series)> =
        kept.into_iter().enumerate().filter_map(|(i, series)| series.map(|s| (i, s))).collect();
    grids = add(grids, kept).await?;
    {
        let mut reads = futures::stream::iter(again.iter().map(|&i| {
            let (state, key, id) = (&state, &key, &distinct[i]);
            async move { Ok::<_, ApiError>((i, state.store.series(id, key, range).await?)) }
        }))
        .buffered(SERIES_READS_IN_FLIGHT);
        while let Some(read) = reads.next().await {
            grids = add(grids, vec![read?]).await?;
        }
    }
    let answer = wire::MetricsQueryAnswer::Groups(wire::GroupedSeries {
        key: key.as_str(),
        groups: groups
            .iter()
            .zip(&members)
            .zip(&grids)
            .map(|(((name, _), m), grid)| wire::GroupSeries {
                name: name.clone(),
                runs: m.len() as u64,
                runs_without_points: m.iter().filter(|&&i| extents[i].is_none()).count() as u64,
                buckets: grid
                    .as_ref()
                    .map(|g| g.buckets().iter().map(wire::GroupBucketView::new).collect())
                    .unwrap_or_default(),
            })
            .collect(),
    });
    json_answer(&answer)
}
