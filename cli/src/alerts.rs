//! `trainlog alerts`: a project's inbox, its channels (where its alerts go) and their
//! deliveries, through the server's API.

use clap::Subcommand;
use serde_json::{json, Value};

#[derive(Subcommand, Debug)]
pub enum AlertsCommand {
    /// The project's latest alerts, newest first.
    List { project: String },
    /// Where the project's alerts go.
    Channel {
        #[command(subcommand)]
        action: ChannelCommand,
    },
    /// The project's latest deliveries: sent, pending (tried again) or failed, with the answer.
    Deliveries { project: String },
    /// The rules the server evaluates for the project's runs.
    Rule {
        #[command(subcommand)]
        action: RuleCommand,
    },
    /// The rules every project has, which server admins give.
    InstallationRule {
        #[command(subcommand)]
        action: InstallationRuleCommand,
    },
    /// Make a project's rules those of an alerts file kept beside the code (YAML: `project:`
    /// and `rules:`, a list): adds the rules it lists that the project lacks.
    Apply {
        file: std::path::PathBuf,
        /// Also remove the project's rules the file does not list.
        #[arg(long)]
        prune: bool,
        /// Say what would change, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum RuleCommand {
    /// Add a rule, written as people say it: "KEY not finite", "KEY > NUMBER", "stalled 10m",
    /// "idle < 10% for 20m", "budget 80%", "failed"… (docs/alerts.md lists every form).
    Add { project: String, rule: String },
    /// The project's rules.
    List { project: String },
    /// Remove rule ID.
    Remove { project: String, id: i64 },
}

#[derive(Subcommand, Debug)]
pub enum InstallationRuleCommand {
    /// Give every project a rule (server admins): its runs are checked against it as against
    /// the project's own rules, and its alerts go to the project's channels.
    Add { rule: String },
    /// The rules every project has.
    List,
    /// Remove rule ID from every project.
    Remove { id: i64 },
}

#[derive(Subcommand, Debug)]
pub enum ChannelCommand {
    /// Send the project's alerts to a webhook (JSON, signed with --secret), Slack, Discord or an
    /// e-mail address (on a server started with --smtp-url).
    Add {
        project: String,
        /// A webhook URL: each alert is POSTed as JSON.
        #[arg(long, group = "target")]
        webhook: Option<String>,
        /// A Slack incoming-webhook URL.
        #[arg(long, group = "target")]
        slack: Option<String>,
        /// A Discord webhook URL.
        #[arg(long, group = "target")]
        discord: Option<String>,
        /// An e-mail address.
        #[arg(long, group = "target")]
        email: Option<String>,
        /// Sign each body with HMAC-SHA256 (`X-Trainlog-Signature: t=…,v1=…`).
        #[arg(long)]
        secret: Option<String>,
        /// Let it reach a private, loopback or link-local address (server admins only).
        #[arg(long)]
        allow_private: bool,
    },
    /// The project's channels.
    List { project: String },
    /// Stop sending the project's alerts to channel ID.
    Remove { project: String, id: i64 },
}

fn encode(name: &str) -> String {
    trainlog::api::encode(name)
}

fn time_text(ms: &Value) -> String {
    crate::admin::time_text(ms.as_i64())
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn alerts(server: Option<&str>, action: AlertsCommand) -> Result<String, trainlog::Error> {
    let api = trainlog::Api::new(server)?;
    Ok(match action {
        AlertsCommand::List { project } => {
            let answer = api.get_json(&format!("/projects/{}/alerts", encode(&project)))?;
            let mut out = String::from("TIME\tLEVEL\tRUN\tSTEP\tCOUNT\tRULE\tTITLE\n");
            for a in answer["alerts"].as_array().into_iter().flatten() {
                out += &format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    time_text(&a["time"]),
                    text(&a["level"]),
                    text(&a["run"]),
                    text(&a["step"]),
                    text(&a["count"]),
                    if a["rule"].as_str().is_some_and(|r| !r.is_empty()) { text(&a["rule"]) } else { "code".into() },
                    text(&a["title"]),
                );
            }
            out
        }
        AlertsCommand::Channel {
            action: ChannelCommand::Add { project, webhook, slack, discord, email, secret, allow_private },
        } => {
            let (kind, url) = match (webhook, slack, discord, email) {
                (Some(u), ..) => ("webhook", u),
                (_, Some(u), ..) => ("slack", u),
                (_, _, Some(u), _) => ("discord", u),
                (.., Some(address)) => ("email", format!("mailto:{address}")),
                _ => {
                    return Err(trainlog::Error::Invalid(
                        "name the channel: --webhook, --slack or --discord URL, or --email ADDRESS".into(),
                    ))
                }
            };
            let body = json!({"kind": kind, "url": url, "secret": secret, "allow_private": allow_private});
            let c = api.post_json(&format!("/projects/{}/alert-channels", encode(&project)), &body)?;
            format!(
                "channel {} added: {} {}{}",
                c["id"],
                text(&c["kind"]),
                text(&c["url"]),
                if c["signed"] == true { " (signed)" } else { "" }
            )
        }
        AlertsCommand::Channel { action: ChannelCommand::List { project } } => {
            let answer = api.get_json(&format!("/projects/{}/alert-channels", encode(&project)))?;
            let mut out = String::from("ID\tKIND\tSIGNED\tPRIVATE\tURL\n");
            for c in answer["channels"].as_array().into_iter().flatten() {
                out += &format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    c["id"],
                    text(&c["kind"]),
                    if c["signed"] == true { "yes" } else { "no" },
                    if c["allow_private"] == true { "allowed" } else { "no" },
                    text(&c["url"])
                );
            }
            out
        }
        AlertsCommand::Channel { action: ChannelCommand::Remove { project, id } } => {
            api.delete_json(&format!("/projects/{}/alert-channels/{id}", encode(&project)))?;
            format!("channel {id} removed")
        }
        AlertsCommand::Rule { action: RuleCommand::Add { project, rule } } => {
            let r = api.post_json(&format!("/projects/{}/alert-rules", encode(&project)), &json!({"rule": rule}))?;
            format!("rule {} added: {}", r["id"], text(&r["rule"]))
        }
        AlertsCommand::Rule { action: RuleCommand::List { project } } => {
            let answer = api.get_json(&format!("/projects/{}/alert-rules", encode(&project)))?;
            let mut out = String::from("ID\tBY\tRULE\n");
            for r in answer["rules"].as_array().into_iter().flatten() {
                let every = if r["installation"] == true { " (every project)" } else { "" };
                out += &format!("{}\t{}\t{}{every}\n", r["id"], text(&r["created_by"]), text(&r["rule"]));
            }
            out
        }
        AlertsCommand::Rule { action: RuleCommand::Remove { project, id } } => {
            api.delete_json(&format!("/projects/{}/alert-rules/{id}", encode(&project)))?;
            format!("rule {id} removed")
        }
        AlertsCommand::InstallationRule { action: InstallationRuleCommand::Add { rule } } => {
            let r = api.post_json("/alert-rules", &json!({ "rule": rule }))?;
            format!("rule {} added to every project: {}", r["id"], text(&r["rule"]))
        }
        AlertsCommand::InstallationRule { action: InstallationRuleCommand::List } => {
            let answer = api.get_json("/alert-rules")?;
            let mut out = String::from("ID\tBY\tRULE\n");
            for r in answer["rules"].as_array().into_iter().flatten() {
                out += &format!("{}\t{}\t{}\n", r["id"], text(&r["created_by"]), text(&r["rule"]));
            }
            out
        }
        AlertsCommand::InstallationRule { action: InstallationRuleCommand::Remove { id } } => {
            api.delete_json(&format!("/alert-rules/{id}"))?;
            format!("rule {id} removed from every project")
        }
        AlertsCommand::Apply { file, prune, dry_run } => {
            let source = std::fs::read_to_string(&file)
                .map_err(|e| trainlog::Error::Invalid(format!("{}: {e}", file.display())))?;
            let wanted = crate::alerts_file::parse(&source)
                .map_err(|e| trainlog::Error::Invalid(format!("{}:{e}", file.display())))?;
            let path = format!("/projects/{}/alert-rules", encode(&wanted.project));
            let answer = api.get_json(&path)?;
            // The project's own rules: those every project has are the admins'.
            let have: Vec<(i64, String)> = answer["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["installation"] != true)
                .map(|r| (r["id"].as_i64().unwrap_or_default(), text(&r["rule"])))
                .collect();
            let mut out = String::new();
            let (mut added, mut removed) = (0, 0);
            for rule in &wanted.rules {
                if have.iter().any(|(_, r)| r == rule) {
                    out += &format!("= {rule}\n");
                    continue;
                }
                if !dry_run {
                    api.post_json(&path, &json!({ "rule": rule }))?;
                }
                out += &format!("+ {rule}\n");
                added += 1;
            }
            for (id, rule) in have.iter().filter(|(_, r)| !wanted.rules.contains(r)) {
                if !prune {
                    out += &format!("  {rule} (not in the file; kept without --prune)\n");
                    continue;
                }
                if !dry_run {
                    api.delete_json(&format!("{path}/{id}"))?;
                }
                out += &format!("- {rule}\n");
                removed += 1;
            }
            out + &format!(
                "{}{} rule(s) added, {} removed, in project {}",
                if dry_run { "dry run: " } else { "" },
                added,
                removed,
                wanted.project
            )
        }
        AlertsCommand::Deliveries { project } => {
            let answer = api.get_json(&format!("/projects/{}/alert-deliveries", encode(&project)))?;
            let mut out = String::from("ID\tSTATUS\tATTEMPTS\tCHANNEL\tTITLE\tANSWER\n");
            for d in answer["deliveries"].as_array().into_iter().flatten() {
                out += &format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\n",
                    d["id"],
                    text(&d["status"]),
                    d["attempts"],
                    text(&d["kind"]),
                    text(&d["title"]),
                    text(&d["answer"])
                );
            }
            out
        }
    })
}

/// The server's SMTP relay from its options: none without `--smtp-url`; the password read from
/// its file.
pub fn smtp_config(
    url: Option<String>,
    from: Option<String>,
    password_file: Option<std::path::PathBuf>,
    ca_file: Option<std::path::PathBuf>,
) -> Result<Option<trainlog_server::SmtpConfig>, String> {
    let Some(url) = url else {
        return Ok(None);
    };
    let from = from.ok_or("--smtp-url needs --smtp-from, the address alert mails come from")?;
    let password = password_file
        .map(|path| {
            std::fs::read_to_string(&path)
                .map(|p| p.trim_end_matches(['\r', '\n']).to_owned())
                .map_err(|e| format!("--smtp-password-file {}: {e}", path.display()))
        })
        .transpose()?;
    Ok(Some(trainlog_server::SmtpConfig { url, from, ca_file, password }))
}

/// `trainlog stop`: asks a running run to stop.
pub fn stop(server: Option<&str>, run_id: &str, reason: &str) -> Result<String, String> {
    trainlog::Api::new(server)
        .and_then(|api| api.stop_run(run_id, reason))
        .map(|stop| {
            format!(
                "asked run {run_id} to stop (by {}); its processes see it with their next heartbeat",
                stop["by"].as_str().unwrap_or("someone")
            )
        })
        .map_err(|e| e.to_string())
}
