//! The OpenAPI document and its route: derived from the handlers' `#[utoipa::path]` attributes
//! and each resource's wire types, merged from every resource's part (`documented`). The error
//! answers every route shares are added here, by one rule each.

use crate::wire::{ErrorBody, Float};
use actix_web::{web, HttpResponse};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{HttpMethod, Operation};
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/openapi.json", web::get().to(openapi));
}

/// This API description (OpenAPI 3.1).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "system", responses((status = 200, description = "The OpenAPI document.", content_type = "application/json", body = Object)))]
pub(crate) async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(document())
}

/// This route's part of the document.
#[derive(OpenApi)]
#[openapi(paths(openapi))]
struct Api;

/// The document's frame: its description, tags and the schemas every error shares. Each
/// resource adds its operations (`documented`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "trainlog",
        description = "Experiment tracking for machine-learning training. Errors answer \
            `{\"error\": {\"code\", \"message\", \"field\"}}`. Times are milliseconds since the Unix epoch. \
            Non-finite floats are the strings \"NaN\", \"Infinity\" and \"-Infinity\".",
        license(name = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, Float)),
    tags(
        (name = "system", description = "Health, the API description and the server's counters."),
        (name = "projects", description = "Projects."),
        (name = "runs", description = "Runs, params, tags, metadata, artifacts and checkpoints."),
        (name = "metrics", description = "Metric series, including the \"sys/\" system and \"cost/\" series."),
        (name = "logs", description = "Console lines of runs: what each rank printed, searched and followed."),
        (name = "media", description = "Images, audio, video, text and files logged with a run, by key and step."),
        (name = "registry", description = "Registered models and their versions, with lineage."),
        (name = "report", description = "The training report: cost, GPU utilization, queue wait and failures of the runs, in groups."),
        (name = "sweeps", description = "Hyperparameter sweeps, their trials and agents."),
        (name = "alerts", description = "Alerts raised by runs, a project's channels and their deliveries."),
        (name = "users", description = "Users and their API keys, on a server run with --auth."),
    ),
)]
struct Frame;

/// Every resource's part of the document.
fn documented() -> Vec<utoipa::openapi::OpenApi> {
    vec![
        Api::openapi(),
        super::system::Api::openapi(),
        super::projects::Api::openapi(),
        super::prices::Api::openapi(),
        super::runs::Api::openapi(),
        super::artifacts::Api::openapi(),
        super::metrics::Api::openapi(),
        super::logs::Api::openapi(),
        super::media::Api::openapi(),
        super::registry::Api::openapi(),
        super::report::Api::openapi(),
        super::sweeps::Api::openapi(),
        super::team::Api::openapi(),
        super::views::Api::openapi(),
        super::alerts::Api::openapi(),
    ]
}

/// The whole API description: the frame, every resource's operations, then the rules that
/// add what shared parts answer.
fn full() -> utoipa::openapi::OpenApi {
    let mut doc = Frame::openapi();
    for part in documented() {
        doc.merge(part);
    }
    let rules: [&dyn Modify; 5] =
        [&PostsSayTheirType, &SharedErrors, &NewRunNeedsProject, &MetricsQueryNeedsRuns, &KeysWhenAuthIsOn];
    for rule in rules {
        rule.modify(&mut doc);
    }
    doc
}

/// The API description as JSON, built once the routes are registered. `x-mlflow-door` lists the
/// MLflow door's routes (method and path), which MLflow's own documentation describes.
pub fn document() -> &'static str {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = full();
        let door: Vec<serde_json::Value> = super::mlflow::route_table()
            .into_iter()
            .map(|(method, path)| serde_json::json!({"method": method, "path": path}))
            .collect();
        doc.extensions = Some(utoipa::openapi::extensions::ExtensionsBuilder::new().add("x-mlflow-door", door).build());
        doc.to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    })
}

/// The methods the API serves at `path`, as an `Allow` header value, when some route has this
/// path; `None` when no route does.
pub fn allowed_methods(path: &str) -> Option<String> {
    static ROUTES: std::sync::OnceLock<Vec<(Vec<String>, Vec<&'static str>)>> = std::sync::OnceLock::new();
    let routes = ROUTES.get_or_init(|| {
        full()
            .paths
            .paths
            .iter()
            .map(|(template, item)| {
                let methods = [
                    ("GET", item.get.is_some()),
                    ("POST", item.post.is_some()),
                    ("PUT", item.put.is_some()),
                    ("PATCH", item.patch.is_some()),
                    ("DELETE", item.delete.is_some()),
                ];
                let segments = template.split('/').map(str::to_owned).collect();
                (segments, methods.iter().filter(|(_, on)| *on).map(|(m, _)| *m).collect())
            })
            .collect()
    });
    let given: Vec<&str> = path.split('/').collect();
    let matches = |template: &[String]| {
        let mut rest = given.iter();
        for (i, t) in template.iter().enumerate() {
            // An artifact's path is the rest of the URL, one segment or more.
            if t == "{path}" && i == template.len() - 1 {
                return rest.next().is_some_and(|s| !s.is_empty());
            }
            match rest.next() {
                Some(s) if t.starts_with('{') => {
                    if s.is_empty() {
                        return false;
                    }
                }
                Some(s) if s == t => {}
                _ => return false,
            }
        }
        rest.next().is_none()
    };
    // Where several routes match, the one with most literal segments is the route: a path that
    // names `search` is that route's, not the `{id}` route's.
    let literals = |t: &[String]| t.iter().filter(|s| !s.starts_with('{')).count();
    let best = routes.iter().filter(|(t, _)| matches(t)).map(|(t, _)| literals(t)).max()?;
    let mut allowed: Vec<&str> = routes
        .iter()
        .filter(|(t, _)| matches(t) && literals(t) == best)
        .flat_map(|(_, methods)| methods.iter().copied())
        .collect();
    allowed.sort_unstable();
    allowed.dedup();
    (!allowed.is_empty()).then(|| allowed.join(", "))
}

/// Adds the error answers that come from shared parts (the host and origin guard, the body
/// decoders, the stores) to every operation they can reach.
struct SharedErrors;

/// Operations that answer 404 for a missing thing named in their body or query rather than
/// their path.
const NOT_FOUND_WITHOUT_PATH: [&str; 6] =
    ["create_run", "search_runs", "get_metrics_many", "query_metrics", "create_sweep", "report"];

/// Operations that answer 409 when the request conflicts with what is stored.
const CONFLICTS: [&str; 12] = [
    "create_user",
    "remove_user",
    "put_artifact",
    "create_project",
    "create_run",
    "log_params",
    "create_model",
    "create_version",
    "set_alias",
    "stop_sweep",
    "resume_sweep",
    "delete_model",
];

/// Changes to a run answer 409 while it is archived; archiving and restoring take any run.
fn changes_a_run(path: &str, id: &str, changes: bool) -> bool {
    let of_a_run = path == "/api/v1/runs/{id}" || path.starts_with("/api/v1/runs/{id}/");
    changes && of_a_run && !matches!(id, "archive_run" | "restore_run")
}

impl Modify for SharedErrors {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            let has_path_params = path.contains('{');
            let api = path.starts_with("/api/v1/");
            for (method, op) in [
                (HttpMethod::Get, item.get.as_mut()),
                (HttpMethod::Post, item.post.as_mut()),
                (HttpMethod::Put, item.put.as_mut()),
                (HttpMethod::Patch, item.patch.as_mut()),
                (HttpMethod::Delete, item.delete.as_mut()),
            ] {
                let Some(op) = op else { continue };
                let id = op.operation_id.clone().unwrap_or_default();
                let changes = method != HttpMethod::Get;
                let has_query = op.parameters.as_ref().is_some_and(|p| !p.is_empty());
                let json_body = op
                    .request_body
                    .as_ref()
                    .is_some_and(|b| matches!(b, RefOr::T(b) if b.content.contains_key("application/json")));
                let any_body = op.request_body.is_some();
                let mut add = |status: &str, reason: &str| add_error(op, status, reason);
                add("421", "misdirected_request: the Host header names neither this server nor an allowed host.");
                if !api {
                    continue;
                }
                if changes {
                    add("403", "forbidden: the request comes from a page of another site (Origin, Sec-Fetch-Site), or (with --auth) the key's user lacks the role it needs.");
                } else if !path.starts_with("/api/v1/health") {
                    add("403", "forbidden: with --auth, the key's user lacks the role this needs.");
                }
                if has_path_params || has_query || any_body {
                    add("400", "invalid_argument: the request is malformed; `field` names what is wrong.");
                }
                if has_path_params || NOT_FOUND_WITHOUT_PATH.contains(&id.as_str()) {
                    add("404", "not_found: something the request names does not exist.");
                }
                if CONFLICTS.contains(&id.as_str()) || changes_a_run(path, &id, changes) {
                    add("409", "conflict: the request contradicts what is stored.");
                }
                if any_body {
                    add("408", "request_timeout: the body did not arrive in time.");
                    add("413", "payload_too_large: the body is over the limit; `limit` gives it in bytes.");
                }
                if json_body || method == HttpMethod::Post {
                    add("415", "unsupported_media_type: the body must be application/json (a POST says so even without a body).");
                }
                if changes {
                    add_retry(op, "503", "unavailable: the server cannot take this now (its buffer is full, its write-ahead log is unsound, or it is stopping); send it again after Retry-After seconds.");
                    add_retry(op, "507", "insufficient_storage: the data disk is full; nothing was written. Send it again once space is freed.");
                }
            }
        }
    }
}

/// Every POST carries a body of a type a page cannot send without a preflight (`body.rs`,
/// `refuse_simple_post`): a POST that takes no body takes an empty JSON object, and an optional
/// body is required.
struct PostsSayTheirType;

impl Modify for PostsSayTheirType {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::request_body::RequestBodyBuilder;
        use utoipa::openapi::Required;
        for item in doc.paths.paths.values_mut() {
            let Some(op) = item.post.as_mut() else { continue };
            match op.request_body.as_mut() {
                Some(RefOr::T(body)) => body.required = Some(Required::True),
                Some(RefOr::Ref(_)) => {}
                None => {
                    let empty = ObjectBuilder::new().schema_type(Type::Object).max_properties(Some(0)).build();
                    op.request_body = Some(RefOr::T(
                        RequestBodyBuilder::new()
                            .description(Some(
                                "An empty JSON object: a POST says it is JSON even with nothing to send.",
                            ))
                            .content("application/json", ContentBuilder::new().schema(Some(empty)).build())
                            .required(Some(Required::True))
                            .build(),
                    ));
                }
            }
        }
    }
}

/// With `--auth`, every operation but the health check needs an API key, as a bearer token or
/// as the password of HTTP basic auth. Without it the server checks none.
struct KeysWhenAuthIsOn;

impl Modify for KeysWhenAuthIsOn {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        components.add_security_scheme("user_and_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)));
        for (path, item) in doc.paths.paths.iter_mut() {
            for op in
                [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete].into_iter().flatten()
            {
                if path.starts_with("/api/v1/health") {
                    op.security = Some(vec![SecurityRequirement::default()]);
                    continue;
                }
                op.security = Some(vec![
                    SecurityRequirement::new("api_key", Vec::<String>::new()),
                    SecurityRequirement::new("user_and_key", Vec::<String>::new()),
                ]);
                add_error(
                    op,
                    "401",
                    "unauthenticated: the server runs with --auth and the request has no valid API key.",
                );
                add_error(
                    op,
                    "429",
                    "too_many_requests: this address failed too many key checks; try again after Retry-After seconds.",
                );
            }
        }
    }
}

/// A new run needs a project; only resuming an existing run by its id may leave it out.
struct NewRunNeedsProject;

impl Modify for NewRunNeedsProject {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else { return };
        let Some(create_run) = components.schemas.get_mut("CreateRun") else { return };
        let rule = serde_json::json!({"anyOf": [
            {"type": "object", "required": ["project"], "properties": {"project": {"type": "string"}}},
            {"type": "object", "required": ["id", "resume"], "properties": {"id": {"type": "string"}, "resume": {"type": "boolean", "enum": [true]}}},
        ]});
        let rule = crate::wire::json_schema(rule);
        let own = std::mem::replace(create_run, RefOr::T(Schema::default()));
        *create_run = RefOr::T(Schema::AllOf(AllOfBuilder::new().item(own).item(rule).build()));
    }
}

/// `POST /metrics/query` takes run ids or groups of them: exactly one of the two.
struct MetricsQueryNeedsRuns;

impl Modify for MetricsQueryNeedsRuns {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else { return };
        let Some(query) = components.schemas.get_mut("MetricsQuery") else { return };
        let rule = serde_json::json!({"oneOf": [
            {"type": "object", "required": ["runs"], "properties": {"runs": {"type": "array"}}},
            {"type": "object", "required": ["groups"], "properties": {"groups": {"type": "object"}}},
        ]});
        let rule = crate::wire::json_schema(rule);
        let own = std::mem::replace(query, RefOr::T(Schema::default()));
        *query = RefOr::T(Schema::AllOf(AllOfBuilder::new().item(own).item(rule).build()));
    }
}

fn error_response(reason: &str) -> ResponseBuilder {
    ResponseBuilder::new()
        .description(reason)
        .content("application/json", ContentBuilder::new().schema(Some(ErrorBody::schema_ref())).build())
}

fn add_error(op: &mut Operation, status: &str, reason: &str) {
    op.responses.responses.entry(status.to_owned()).or_insert_with(|| RefOr::T(error_response(reason).build()));
}

fn add_retry(op: &mut Operation, status: &str, reason: &str) {
    let response: Response = error_response(reason)
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                .description(Some("Seconds to wait before sending the request again."))
                .build(),
        )
        .build();
    op.responses.responses.entry(status.to_owned()).or_insert(RefOr::T(response));
}

trait SchemaRef {
    fn schema_ref() -> RefOr<utoipa::openapi::schema::Schema>;
}

impl<T: ToSchema> SchemaRef for T {
    fn schema_ref() -> RefOr<utoipa::openapi::schema::Schema> {
        RefOr::Ref(utoipa::openapi::Ref::from_schema_name(T::name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire;
    use serde_json::Value;
    use trainlog_schema::limits::*;

    fn doc() -> Value {
        serde_json::from_str(document()).expect("the document is JSON")
    }

    #[test]
    fn every_hand_written_schema_parses() {
        assert!(!document().contains(wire::INVALID_SCHEMA), "{}", document());
    }

    /// Attribute values must be literals; these tie them to the limits the server enforces.
    #[test]
    fn documented_limits_are_the_enforced_ones() {
        let doc = doc();
        let schema = |name: &str, field: &str| doc["components"]["schemas"][name]["properties"][field].clone();
        let cases = [
            (schema("CreateProject", "name"), MAX_NAME_CHARS, Some(wire::TEXT)),
            (schema("CreateProject", "description"), MAX_TEXT_CHARS, None),
            (schema("CreateModel", "name"), MAX_NAME_CHARS, Some(wire::TEXT)),
            (schema("MetricPointInput", "key"), MAX_KEY_CHARS, Some(wire::TEXT)),
            (schema("FileEntry", "path"), MAX_ARTIFACT_PATH_CHARS, Some(wire::ARTIFACT_PATH)),
            (schema("CreateSweep", "name"), MAX_SWEEP_NAME_CHARS, None),
            (schema("SearchRuns", "filter"), MAX_FILTER_BYTES, None),
        ];
        for (property, max, pattern) in cases {
            assert_eq!(property["maxLength"], max, "{property}");
            if let Some(p) = pattern {
                assert_eq!(property["pattern"], p, "{property}");
            }
        }
        let alias = &doc["components"]["schemas"]["CreateVersion"]["properties"]["alias"];
        assert_eq!(alias["pattern"], wire::ALIAS);
        let create_run = &doc["components"]["schemas"]["CreateRun"]["allOf"][0]["properties"];
        assert_eq!(create_run["id"]["pattern"], wire::RUN_ID);
        let query = |path: &str, name: &str| {
            let op = &doc["paths"][path]["get"]["parameters"];
            op.as_array().and_then(|ps| ps.iter().find(|p| p["name"] == name)).cloned().unwrap_or_default()
        };
        assert_eq!(query("/api/v1/projects/{name}/runs", "filter")["schema"]["maxLength"], MAX_QUERY_FILTER_CHARS);
        assert_eq!(query("/api/v1/projects/{name}/runs", "order_by")["schema"]["maxLength"], MAX_QUERY_ORDER_BY_CHARS);
        assert_eq!(query("/api/v1/projects/{name}/runs", "page_token")["schema"]["pattern"], wire::PAGE_TOKEN);
        assert_eq!(query("/api/v1/metrics", "runs")["schema"]["maxLength"], MAX_QUERY_RUN_IDS_CHARS);
        assert_eq!(query("/api/v1/metrics", "runs")["schema"]["pattern"], wire::RUN_IDS);
        assert_eq!(query("/api/v1/models", "search")["schema"]["maxLength"], MAX_MODEL_SEARCH_CHARS);
        assert_eq!(query("/api/v1/runs/{id}/metrics", "key")["schema"]["pattern"], wire::TEXT);
        assert_eq!(query("/api/v1/runs/{id}", "id")["schema"]["pattern"], wire::RUN_ID);
        assert_eq!(
            query("/api/v1/models/{name}/versions/{version}", "version")["schema"]["pattern"],
            wire::VERSION_REF
        );
        let view = query("/api/v1/projects/{name}/views/{view}", "view");
        assert_eq!(
            (&view["schema"]["pattern"], &view["schema"]["maxLength"]),
            (&super::super::views::VIEW_NAME.into(), &MAX_VIEW_NAME_CHARS.into())
        );
    }

    #[test]
    fn a_wrong_method_on_a_known_path_is_told_what_the_path_takes() {
        assert_eq!(allowed_methods("/api/v1/runs/abc").as_deref(), Some("DELETE, GET, PATCH"));
        assert_eq!(allowed_methods("/api/v1/runs/search").as_deref(), Some("POST"));
        assert_eq!(allowed_methods("/api/v1/runs/abc/artifacts/a/b/c.txt").as_deref(), Some("DELETE, GET, PUT"));
        assert_eq!(allowed_methods("/api/v1/nothing-here"), None);
        assert_eq!(allowed_methods("/api/v1/runs/abc/artifacts/"), None);
    }

    #[test]
    fn error_answers_are_documented_where_they_can_happen() {
        let doc = doc();
        let responses = |path: &str, method: &str| doc["paths"][path][method]["responses"].clone();
        let post_metrics = responses("/api/v1/runs/{id}/metrics", "post");
        for status in ["200", "400", "403", "404", "413", "415", "421", "503", "507"] {
            assert!(post_metrics[status].is_object(), "POST metrics lacks {status}: {post_metrics}");
        }
        assert!(post_metrics["503"]["headers"]["Retry-After"].is_object());
        let health = responses("/api/v1/health", "get");
        assert!(health["421"].is_object() && health["400"].is_null() && health["403"].is_null(), "{health}");
    }
}
