//! The code a run was started from: commit, branch, remote and uncommitted changes, read through
//! the `git` command line (no libgit2).
//!
//! Each git command runs with a deadline (killed past it), no terminal prompt and no optional
//! locks, so capturing never hangs the run or disturbs a concurrent `git` in the same checkout.
//! Remote URLs are stored without credentials, and without the values of secret query
//! parameters (`?access_token=`); the diff is stored with its secrets masked (private keys,
//! tokens, secret assignments: see [`redact`]) and says how many were.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::redact;

/// How long one git command may run before it is killed.
const GIT_DEADLINE: Duration = Duration::from_secs(10);
/// Output kept from commands whose output is not the diff (hashes, names, URLs, file lists).
const SMALL_OUTPUT: usize = 1 << 20;

/// What a git command answered.
struct GitOutput {
    success: bool,
    /// At most the requested number of bytes.
    stdout: Vec<u8>,
    /// Whether stdout was longer than what was kept.
    truncated: bool,
}

impl GitOutput {
    /// Trimmed stdout of a successful command, None when it failed or printed nothing.
    fn line(self) -> Option<String> {
        if !self.success {
            return None;
        }
        let text = String::from_utf8_lossy(&self.stdout).trim().to_owned();
        (!text.is_empty()).then_some(text)
    }
}

/// Runs `git -C dir args…`, keeping at most `keep` bytes of stdout (the rest is read and
/// dropped so git can finish). None when git cannot be started or runs past the deadline.
fn run_git(dir: &Path, args: &[&str], keep: usize) -> Option<GitOutput> {
    run_git_within(dir, args, keep, GIT_DEADLINE)
}

fn run_git_within(dir: &Path, args: &[&str], keep: usize, limit: Duration) -> Option<GitOutput> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "core.quotepath=off", "-c", "color.ui=false"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_PAGER", "cat")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut truncated = false;
        let mut buffer = [0u8; 64 * 1024];
        loop {
            match stdout.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    let room = keep.saturating_sub(kept.len());
                    if n > room {
                        truncated = true;
                    }
                    kept.extend_from_slice(&buffer[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = send.send((kept, truncated));
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    // git has exited; a grandchild still holding the pipe must not hold us either.
    let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(500));
    let (stdout, truncated) = receive.recv_timeout(remaining).ok()?;
    Some(GitOutput { success: status.success(), stdout, truncated })
}

/// Removes credentials from a remote URL: `https://user:pass@host/x.git` and
/// `https://token@host/x.git` become `https://host/x.git`. For `ssh://` URLs the user name is
/// kept and only a password is removed; scp-like `git@host:x.git` and local paths are kept as is.
pub fn strip_credentials(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let scheme = &url[..scheme_end];
    if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
        return url.to_owned();
    }
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let host_and_after = &rest[at + 1..];
    let is_ssh = scheme.eq_ignore_ascii_case("ssh") || scheme.to_ascii_lowercase().contains("ssh");
    let kept_user = match userinfo.split_once(':') {
        Some((user, _password)) if is_ssh => Some(user),
        None if is_ssh => Some(userinfo),
        _ => None,
    };
    match kept_user {
        Some(user) if !user.is_empty() => format!("{scheme}://{user}@{host_and_after}"),
        _ => format!("{scheme}://{host_and_after}"),
    }
}

/// Cuts `text` to at most `cap` bytes on a char boundary; true when something was cut.
fn cap_text(text: &mut String, cap: usize) -> bool {
    if text.len() <= cap {
        return false;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// The git state of the work tree containing `dir`, or None when `dir` is not in a git work tree
/// or git is not installed.
///
/// The object: `commit` (null before the first commit), `branch` (null when detached), `remote_url`
/// (origin's, else the first remote's; credentials and secret query parameters removed; null
/// without remotes), `dirty` (uncommitted changes, untracked files included), `diff` (`git diff
/// HEAD` followed by the list of untracked files, cut at `diff_cap_bytes`, then back to its last
/// whole line, with its secrets masked by [`redact::redact_text`]), `diff_truncated`,
/// `diff_redactions` (how many secrets were masked), `root`. With `diff_cap_bytes` None the diff
/// is not read: `diff`, `diff_truncated` and `diff_redactions` are null.
pub fn capture(dir: &Path, diff_cap_bytes: Option<usize>) -> Option<Value> {
    let inside = run_git(dir, &["rev-parse", "--is-inside-work-tree"], SMALL_OUTPUT)?.line();
    if inside.as_deref() != Some("true") {
        return None;
    }
    let root = run_git(dir, &["rev-parse", "--show-toplevel"], SMALL_OUTPUT).and_then(GitOutput::line);
    // From here on, work from the top of the work tree: some commands (ls-files) only look below
    // the directory they run in.
    let dir = root.as_deref().map(Path::new).unwrap_or(dir);
    let commit =
        run_git(dir, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], SMALL_OUTPUT).and_then(GitOutput::line);
    let branch = run_git(dir, &["symbolic-ref", "--quiet", "--short", "HEAD"], SMALL_OUTPUT).and_then(GitOutput::line);
    let remote_url = remote_url(dir).map(|url| redact::redact_urls(&strip_credentials(&url)).0);

    let status = run_git(dir, &["status", "--porcelain", "--untracked-files=normal"], SMALL_OUTPUT);
    let status_known = status.as_ref().is_some_and(|s| s.success);
    let status_dirty = status.as_ref().is_some_and(|s| s.success && !s.stdout.is_empty());

    let diff = diff_cap_bytes.map(|cap| read_diff(dir, commit.is_some(), cap));
    let dirty =
        if status_known { Some(status_dirty) } else { diff.as_ref().filter(|d| d.known).map(|d| !d.text.is_empty()) };

    Some(json!({
        "commit": commit,
        "branch": branch,
        "remote_url": remote_url,
        "dirty": dirty,
        "diff": diff.as_ref().map(|d| d.text.as_str()),
        "diff_truncated": diff.as_ref().map(|d| d.truncated),
        "diff_redactions": diff.as_ref().map(|d| d.redactions),
        "root": root,
    }))
}

/// The uncommitted changes of a work tree.
struct Diff {
    /// `git diff` against HEAD (or the empty tree) then the untracked files, at most the cap.
    text: String,
    truncated: bool,
    /// How many secrets were masked in `text`.
    redactions: usize,
    /// Whether `git diff` answered (else `text` holds at most the untracked files).
    known: bool,
}

/// Reads the diff of the work tree at `root`, cut at `cap_bytes` on a char boundary and then back
/// to its last whole line (a secret cut in two could no longer be recognised), secrets masked.
fn read_diff(root: &Path, has_commit: bool, cap_bytes: usize) -> Diff {
    // Before the first commit there is no HEAD: compare with the empty tree instead.
    let base = if has_commit {
        Some("HEAD".to_owned())
    } else {
        run_git(root, &["hash-object", "-t", "tree", "--stdin"], SMALL_OUTPUT).and_then(GitOutput::line)
    };
    // One byte more than the cap tells whether the cap cut anything.
    let keep = cap_bytes.saturating_add(1);
    let diff_output = base.and_then(|base| {
        run_git(root, &["diff", "--no-ext-diff", "--no-textconv", "--no-color", base.as_str(), "--"], keep)
    });
    let untracked = run_git(root, &["ls-files", "--others", "--exclude-standard", "-z"], SMALL_OUTPUT);

    let mut truncated = false;
    let mut text = String::new();
    if let Some(output) = &diff_output {
        truncated |= output.truncated;
        text.push_str(&String::from_utf8_lossy(&output.stdout));
    }
    let mut untracked_files: Vec<String> = Vec::new();
    if let Some(output) = untracked.filter(|o| o.success) {
        truncated |= output.truncated;
        untracked_files = output
            .stdout
            .split(|b| *b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
    }
    if !untracked_files.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# Untracked files:\n");
        for name in &untracked_files {
            text.push_str("#   ");
            text.push_str(name);
            text.push('\n');
        }
    }
    truncated |= cap_text(&mut text, cap_bytes);
    if truncated {
        if let Some(last_newline) = text.rfind('\n') {
            text.truncate(last_newline + 1);
        }
    }
    let (text, redactions) = redact::redact_text(&text);
    Diff { text, truncated, redactions, known: diff_output.as_ref().is_some_and(|o| o.success) }
}

/// origin's URL, else the first remote's.
fn remote_url(dir: &Path) -> Option<String> {
    let remotes = run_git(dir, &["remote"], SMALL_OUTPUT)?.line()?;
    let names: Vec<&str> = remotes.lines().map(str::trim).filter(|n| !n.is_empty()).collect();
    let name = names.iter().find(|n| **n == "origin").or_else(|| names.first())?;
    run_git(dir, &["remote", "get-url", name], SMALL_OUTPUT)?.line()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn strips_user_and_password() {
        assert_eq!(strip_credentials("https://user:pass@host/x.git"), "https://host/x.git");
        assert_eq!(strip_credentials("https://ghp_token123@github.com/org/repo"), "https://github.com/org/repo");
        assert_eq!(strip_credentials("http://u:p%40ss@host:8080/a/b.git"), "http://host:8080/a/b.git");
        assert_eq!(strip_credentials("https://user:p@ss@host/x.git"), "https://host/x.git");
        assert_eq!(strip_credentials("ssh://git:secret@host:22/x.git"), "ssh://git@host:22/x.git");
    }

    #[test]
    fn keeps_urls_without_credentials() {
        for url in [
            "git@github.com:org/repo.git",
            "ssh://git@host/x.git",
            "https://host/x.git",
            "https://host/path/with@sign.git",
            "/srv/git/repo.git",
            "file:///srv/git/repo.git",
        ] {
            assert_eq!(strip_credentials(url), url);
        }
    }

    #[test]
    fn cap_respects_char_boundaries() {
        let mut text = "aé€".to_owned(); // 1 + 2 + 3 bytes
        assert!(cap_text(&mut text, 4));
        assert_eq!(text, "aé");
        let mut text = "abc".to_owned();
        assert!(!cap_text(&mut text, 3));
        assert_eq!(text, "abc");
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let path = std::env::temp_dir().join(format!("trainlog-git-{tag}-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let output = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
        assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    fn repo() -> TempDir {
        let tmp = TempDir::new("repo");
        let dir = tmp.0.as_path();
        git(dir, &["init", "--quiet", "--initial-branch=trunk"]);
        git(dir, &["config", "user.name", "Test"]);
        git(dir, &["config", "user.email", "test@example.com"]);
        git(dir, &["config", "commit.gpgsign", "false"]);
        std::fs::write(dir.join("train.py"), "lr = 0.1\n").unwrap();
        git(dir, &["add", "train.py"]);
        git(dir, &["commit", "--quiet", "-m", "first"]);
        git(dir, &["remote", "add", "origin", "https://user:secret@example.com/org/repo.git"]);
        tmp
    }

    #[test]
    fn captures_a_dirty_repository() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        std::fs::write(dir.join("train.py"), "lr = 0.2\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "untracked\n").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();

        // From a subdirectory: the work tree is found above it.
        let value = capture(&dir.join("sub"), Some(1 << 20)).unwrap();
        assert_eq!(value["commit"], git(dir, &["rev-parse", "HEAD"]).as_str());
        assert_eq!(value["commit"].as_str().map(str::len), Some(40));
        assert_eq!(value["branch"], "trunk");
        assert_eq!(value["remote_url"], "https://example.com/org/repo.git");
        assert!(!value.to_string().contains("secret"), "{value}");
        assert_eq!(value["dirty"], true);
        let diff = value["diff"].as_str().unwrap();
        assert!(diff.contains("-lr = 0.1") && diff.contains("+lr = 0.2"), "{diff}");
        assert!(diff.contains("notes.txt"), "untracked file listed: {diff}");
        assert_eq!(value["diff_truncated"], false);
        assert_eq!(value["diff_redactions"], 0);
        let root = PathBuf::from(value["root"].as_str().unwrap());
        assert_eq!(root.canonicalize().unwrap(), dir.canonicalize().unwrap());
    }

    #[test]
    fn secrets_in_the_diff_are_masked_and_counted() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
        std::fs::write(dir.join("train.py"), "lr = 0.2\napi_key = 'sk-live-123'\nmax_tokens = 512\n").unwrap();
        std::fs::write(dir.join("deploy_key"), key).unwrap();
        git(dir, &["add", "deploy_key"]);
        let value = capture(dir, Some(1 << 20)).unwrap();
        let diff = value["diff"].as_str().unwrap();
        assert!(diff.contains("+api_key = '***'\n") && diff.contains("+max_tokens = 512\n"), "{diff}");
        assert!(diff.contains("+lr = 0.2\n") && diff.contains("+***\n"), "{diff}");
        assert!(!diff.contains("sk-live-123") && !diff.contains("b3BlbnNzaC1rZXktdjEAAAAA"), "{diff}");
        assert_eq!(value["diff_redactions"], 2);
    }

    #[test]
    fn a_secret_at_the_cap_is_not_kept_in_part() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        std::fs::write(dir.join("train.py"), "lr = 0.2\npassword = \"hunter2-and-more\"\n").unwrap();
        let cut_inside_the_secret = git(dir, &["diff", "HEAD"]).find("hunter2").unwrap() + 4;
        let value = capture(dir, Some(cut_inside_the_secret)).unwrap();
        let diff = value["diff"].as_str().unwrap();
        assert_eq!(value["diff_truncated"], true);
        assert!(diff.ends_with("+lr = 0.2\n") && !diff.contains("hunt"), "{diff}");
    }

    #[test]
    fn clean_repository_is_not_dirty() {
        let tmp = repo();
        let value = capture(&tmp.0, Some(1 << 20)).unwrap();
        assert_eq!(value["dirty"], false);
        assert_eq!(value["diff"], "");
        assert_eq!(value["diff_truncated"], false);
    }

    #[test]
    fn without_the_diff_only_the_state_is_kept() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        std::fs::write(dir.join("train.py"), "api_key = 'sk-live-123'\n").unwrap();
        std::fs::write(dir.join("credentials.txt"), "x\n").unwrap();
        let value = capture(dir, None).unwrap();
        assert_eq!(value["commit"], git(dir, &["rev-parse", "HEAD"]).as_str());
        assert_eq!(value["branch"], "trunk");
        assert_eq!(value["dirty"], true);
        assert_eq!(value["diff"], Value::Null);
        assert_eq!(value["diff_truncated"], Value::Null);
        assert_eq!(value["diff_redactions"], Value::Null);
        let text = value.to_string();
        assert!(!text.contains("sk-live-123") && !text.contains("credentials.txt"), "{value}");
    }

    #[test]
    fn remote_url_loses_secret_query_parameters() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        git(dir, &["remote", "set-url", "origin", "https://example.com/org/repo.git?access_token=tok123&ref=main"]);
        let value = capture(dir, None).unwrap();
        assert_eq!(value["remote_url"], "https://example.com/org/repo.git?access_token=***&ref=main");
        git(dir, &["remote", "set-url", "origin", "ssh://git:hunter2@example.com/org/repo.git"]);
        let value = capture(dir, None).unwrap();
        assert_eq!(value["remote_url"], "ssh://git@example.com/org/repo.git");
    }

    #[test]
    fn untracked_file_alone_makes_dirty() {
        let tmp = repo();
        std::fs::write(tmp.0.join("new.py"), "x = 1\n").unwrap();
        let value = capture(&tmp.0, Some(1 << 20)).unwrap();
        assert_eq!(value["dirty"], true);
        assert!(value["diff"].as_str().unwrap().contains("new.py"), "{value}");
    }

    #[test]
    fn diff_is_capped() {
        let tmp = repo();
        let dir = tmp.0.as_path();
        let big: String = (0..2000).map(|i| format!("line {i} é\n")).collect();
        std::fs::write(dir.join("train.py"), big).unwrap();
        let value = capture(dir, Some(100)).unwrap();
        let diff = value["diff"].as_str().unwrap();
        assert!(diff.len() <= 100 && diff.len() > 50, "{}", diff.len());
        assert!(diff.starts_with("diff --git") && diff.ends_with('\n'), "{diff}");
        assert_eq!(value["diff_truncated"], true);
        assert_eq!(value["dirty"], true);
    }

    #[test]
    fn repository_without_commits() {
        let tmp = TempDir::new("empty");
        git(&tmp.0, &["init", "--quiet"]);
        std::fs::write(tmp.0.join("a.txt"), "a\n").unwrap();
        let value = capture(&tmp.0, Some(1 << 20)).unwrap();
        assert_eq!(value["commit"], Value::Null);
        assert_eq!(value["remote_url"], Value::Null);
        assert_eq!(value["dirty"], true);
        assert!(value["diff"].as_str().unwrap().contains("a.txt"), "{value}");
    }

    #[test]
    fn a_hanging_git_is_killed_at_the_deadline() {
        let tmp = TempDir::new("hang");
        let start = Instant::now();
        let output = run_git_within(&tmp.0, &["-c", "alias.hang=!sleep 3", "hang"], 100, Duration::from_millis(200));
        assert!(output.is_none());
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
        // The same command within its time answers.
        let output = run_git_within(&tmp.0, &["-c", "alias.fast=!echo hi", "fast"], 100, Duration::from_secs(10));
        assert_eq!(output.and_then(GitOutput::line).as_deref(), Some("hi"));
    }

    #[test]
    fn output_beyond_keep_is_dropped_and_flagged() {
        let tmp = TempDir::new("keep");
        let output = run_git_within(&tmp.0, &["-c", "alias.many=!seq 1 100000", "many"], 10, GIT_DEADLINE).unwrap();
        assert!(output.success);
        assert_eq!(output.stdout, b"1\n2\n3\n4\n5\n");
        assert!(output.truncated);
    }

    #[test]
    fn not_a_repository() {
        let tmp = TempDir::new("plain");
        // GIT_CEILING_DIRECTORIES is not needed: the temp dir is not inside a repository here;
        // check that assumption so the test means what it says.
        let above = Command::new("git").arg("-C").arg(&tmp.0).args(["rev-parse", "--git-dir"]).output().unwrap();
        assert!(!above.status.success(), "temp dir unexpectedly inside a git repository");
        assert_eq!(capture(&tmp.0, Some(1000)), None);
        assert_eq!(capture(&tmp.0.join("missing"), Some(1000)), None);
    }
}
