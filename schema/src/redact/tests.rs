//! The redaction rules, shape by shape: what is masked, what is kept and how many are counted.

use super::*;

fn redact(args: &[&str]) -> Vec<String> {
    redact_command_line(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).0
}

fn counted(args: &[&str]) -> usize {
    redact_command_line(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).1
}

fn urls(text: &str) -> String {
    redact_urls(text).0
}

fn text(text: &str) -> String {
    redact_text(text).0
}

/// Each text is left exactly as it is, with nothing counted.
fn assert_kept(texts: &[&str]) {
    for kept in texts {
        assert_eq!(redact_text(kept), (kept.to_string(), 0), "{kept:?} should be kept");
    }
}

#[test]
fn secret_names() {
    for name in [
        "password",
        "db-password",
        "DB_PASSWORD",
        "dbpassword",
        "passwd",
        "pwd",
        "token",
        "hf_token",
        "apiToken",
        "access_token",
        "secret",
        "client-secret",
        "key",
        "api-key",
        "api_key",
        "apikey",
        "apiKey",
        "APIKey",
        "access-key",
        "access_key",
        "private-key",
        "aws-secret-access-key",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "sig",
        "auth",
        "wandb.api_key",
        "pass",
        "db.pass",
        "pw",
        "db-pw",
        "bearer",
        "cookie",
        "jwt",
    ] {
        assert!(is_secret_name(name), "{name} should be secret");
    }
}

#[test]
fn names_that_are_not_secret() {
    for name in [
        "lr",
        "keyframes",
        "key-frames",
        "key_points",
        "max-tokens",
        "tokenizer",
        "auth-mode",
        "monkey",
        "batch-size",
        "AWSAccessKeyId",
        "data-dir",
        "bypass",
        "compass",
        "pass-rate",
        "cookies-dir",
        "",
    ] {
        assert!(!is_secret_name(name), "{name} should not be secret");
    }
}

#[test]
fn assignment_names_need_a_secret_last_word() {
    for name in [
        "password",
        "DB_PASSWORD",
        "sslpassword",
        "pwd",
        "API_KEY",
        "openai_api_key",
        "SECRET_KEY",
        "aws_secret_access_key",
        "apikey",
        "client_secret",
        "HF_TOKEN",
        "self.token",
        "db.pass",
        "session_cookie",
        "jwt",
    ] {
        assert!(is_secret_assignment_name(name), "{name} should be secret");
    }
    for name in
        ["key", "sort_key", "metric_key", "token_type", "secretName", "password_file", "auth", "sig", "tokenizer"]
    {
        assert!(!is_secret_assignment_name(name), "{name} should not be secret");
    }
}

#[test]
fn ordinary_arguments_are_untouched() {
    let args = [
        "python",
        "train.py",
        "--lr",
        "0.1",
        "--keyframes",
        "3",
        "--key-frames=4",
        "-v",
        "data/",
        "--",
        "x",
        "--max-tokens",
        "512",
        "tokenizer=bert-base",
        "--compass",
        "north",
    ];
    assert_eq!(redact(&args), args);
    assert_eq!(counted(&args), 0);
}

#[test]
fn secret_flag_values_are_masked_in_both_forms() {
    let args = ["train.py", "--api-key", "abc", "--password=x", "-token=t", "-secret", "s", "--lr", "0.1"];
    assert_eq!(
        redact(&args),
        ["train.py", "--api-key", "***", "--password=***", "-token=***", "-secret", "***", "--lr", "0.1"]
    );
    assert_eq!(counted(&args), 4);
    assert_eq!(redact(&["--apiKey", "abc", "--DB_PASSWORD=pw"]), ["--apiKey", "***", "--DB_PASSWORD=***"]);
}

#[test]
fn new_secret_long_flags_are_masked() {
    let args = ["--pass", "a", "--pw=b", "--bearer", "c", "--cookie", "d", "--jwt=e", "--db-pass", "f"];
    assert_eq!(
        redact(&args),
        ["--pass", "***", "--pw=***", "--bearer", "***", "--cookie", "***", "--jwt=***", "--db-pass", "***"]
    );
    assert_eq!(counted(&args), 6);
}

#[test]
fn the_short_password_flag_is_masked_glued_or_apart() {
    let args = ["mysql", "-u", "root", "-phunter2", "-h", "db", "-p", "s3cret", "-v"];
    assert_eq!(redact(&args), ["mysql", "-u", "root", "-p***", "-h", "db", "-p", "***", "-v"]);
    assert_eq!(counted(&args), 2);
    assert_eq!(redact(&["-p", "--next"]), ["-p", "--next"]);
    assert_eq!(redact(&["-password=x", "-pw", "y"]), ["-password=***", "-pw", "***"]);
}

#[test]
fn a_secret_flag_followed_by_a_flag_masks_nothing() {
    assert_eq!(redact(&["--use-token", "--lr", "0.1"]), ["--use-token", "--lr", "0.1"]);
    assert_eq!(redact(&["--password="]), ["--password="]);
    assert_eq!(redact(&["--token"]), ["--token"]);
    assert_eq!(counted(&["--use-token", "--lr", "0.1", "--password=", "--token"]), 0);
}

#[test]
fn overrides_with_secret_names_are_masked() {
    let args = ["train.py", "db.password=hunter2", "+wandb.api_key=k", "db.pass=p", "optimizer.lr=0.1", "a == b"];
    assert_eq!(
        redact(&args),
        ["train.py", "db.password=***", "+wandb.api_key=***", "db.pass=***", "optimizer.lr=0.1", "a == b"]
    );
    assert_eq!(counted(&args), 3);
}

#[test]
fn a_connection_string_argument_loses_its_password() {
    let args = ["--dsn", "host=db user=u password=hunter2 dbname=x", "--odbc=Server=s;UID=u;PWD=pw1;"];
    assert_eq!(redact(&args), ["--dsn", "host=db user=u password=*** dbname=x", "--odbc=Server=s;UID=u;PWD=***;"]);
    assert_eq!(counted(&args), 2);
    assert_eq!(text("host=db sslpassword='a b' user=u"), "host=db sslpassword='***' user=u");
    assert_eq!(text("dbname=x passwd=p1 port=5432"), "dbname=x passwd=*** port=5432");
}

#[test]
fn tokens_under_any_flag_are_masked() {
    let token = format!("ghp_{}", "a1B2".repeat(9));
    assert_eq!(redact(&["--hub", &token, "--repo", "org/x"]), ["--hub", "***", "--repo", "org/x"]);
}

#[test]
fn redacting_twice_masks_nothing_more() {
    let args = [
        "--password=x",
        "--api-key",
        "k",
        "-phunter2",
        "-p",
        "y",
        "db.pass=z",
        "postgres://u:pw@h/db",
        "host=db password=q",
    ];
    let (once, count) = redact_command_line(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    assert_eq!(count, 7);
    assert_eq!(redact_command_line(&once), (once.clone(), 0));
    let diff = "+password = \"abc\"\n+API_KEY=xyz\n+url = https://u:p@h/x?token=t\n";
    let (once, count) = redact_text(diff);
    assert_eq!(count, 4, "{once}");
    assert_eq!(redact_text(&once), (once.clone(), 0));
}

#[test]
fn urls_in_arguments_lose_their_credentials() {
    assert_eq!(
        redact(&["--db", "postgres://u:pw@h/db", "--db=mysql://root:r00t@localhost:3306/x", "s3://bucket/key"]),
        ["--db", "postgres://u:***@h/db", "--db=mysql://root:***@localhost:3306/x", "s3://bucket/key"]
    );
}

#[test]
fn url_user_and_password_are_masked() {
    assert_eq!(redact_urls("postgres://user:pass@host:5432/db"), ("postgres://user:***@host:5432/db".into(), 1));
    assert_eq!(urls("https://user:p@ss@host/x.git"), "https://user:***@host/x.git");
    assert_eq!(urls("https://ghp_abc123@github.com/org/repo"), "https://***@github.com/org/repo");
    assert_eq!(urls("git+https://tok@github.com/org/pkg"), "git+https://***@github.com/org/pkg");
    assert_eq!(urls("ssh://git@host/x.git"), "ssh://git@host/x.git");
}

#[test]
fn url_query_secrets_are_masked() {
    assert_eq!(
        redact_urls("https://host/a?access_token=xyz&page=2#frag"),
        ("https://host/a?access_token=***&page=2#frag".into(), 1)
    );
    assert_eq!(
        urls("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc&X-Amz-Expires=60"),
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60"
    );
    assert_eq!(
        urls("https://acct.blob.core.windows.net/c?sv=1&sig=s%3D"),
        "https://acct.blob.core.windows.net/c?sv=1&sig=***"
    );
    assert_eq!(urls("https://host/cb#access_token=t&state=1"), "https://host/cb#access_token=***&state=1");
    assert_eq!(redact_urls("https://host/a?key=k&apikey=z"), ("https://host/a?key=***&apikey=***".into(), 2));
}

#[test]
fn urls_without_credentials_are_untouched() {
    for kept in [
        "https://host/x.git",
        "https://host/path/with@sign.git?page=2&sort=asc#top",
        "http://127.0.0.1:7310",
        "file:///srv/data",
        "s3://bucket/prefix/",
        "git@github.com:org/repo.git",
        "no url here",
        "://odd",
        "",
    ] {
        assert_eq!(redact_urls(kept), (kept.to_string(), 0));
    }
}

#[test]
fn urls_inside_longer_text_are_found() {
    assert_eq!(
        urls("connect to 'postgres://a:b@h/db' then é http://x:y@z/?token=t done"),
        "connect to 'postgres://a:***@h/db' then é http://x:***@z/?token=*** done"
    );
}

#[test]
fn a_private_key_block_is_masked_whole() {
    let diff = "+key = load()\n+-----BEGIN RSA PRIVATE KEY-----\n+MIIEpAIBAAKCAQEA1\n+QWxhZGRpbjpvcGVu\n+-----END RSA PRIVATE KEY-----\n+done = 1\n";
    assert_eq!(redact_text(diff), ("+key = load()\n+***\n+done = 1\n".into(), 1));
    let two = "-----BEGIN PRIVATE KEY-----\nAAA\n-----END PRIVATE KEY-----\nx\n-----BEGIN OPENSSH PRIVATE KEY-----\nBBB\n-----END OPENSSH PRIVATE KEY-----";
    assert_eq!(redact_text(two), ("***\nx\n***".into(), 2));
    let cut = "ok\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI";
    assert_eq!(redact_text(cut), ("ok\n***".into(), 1));
    assert_kept(&[
        "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    ]);
}

#[test]
fn tokens_of_known_shapes_are_masked() {
    let github = format!("ghp_{}", "Ab1".repeat(12));
    let cases = [
        ("aws = AKIAIOSFODNN7EXAMPLE".to_owned(), "aws = ***"),
        ("id ASIAY34FZKBOKMUTVV7A here".to_owned(), "id *** here"),
        (format!("push {github}"), "push ***"),
        (format!("gho_{} ghu_{} ghs_{}", "x1".repeat(18), "y2".repeat(18), "z3".repeat(18)), "*** *** ***"),
        (format!("github_pat_11ABCDEFG0{}", "a_b1".repeat(15)), "***"),
        ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKl".to_owned(), "slack ***"),
        ("xoxp-1234-5678-abcdefghij".to_owned(), "***"),
        ("OPENAI sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn".to_owned(), "OPENAI ***"),
        ("sk-ant-api03-abcDEF123456ghiJKL789mno-xyz".to_owned(), "***"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc".to_owned(), "stripe ***"),
        ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz12345678".to_owned(), "***"),
        ("AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q".to_owned(), "***"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
                .to_owned(),
            "jwt ***",
        ),
        (format!("TRAINLOG tl_3f9c0a12b4de_{}", "0123456789abcdef".repeat(4)), "TRAINLOG tl_3f9c0a12b4de_***"),
    ];
    for (input, expected) in &cases {
        let (redacted, count) = redact_text(input);
        assert_eq!(redacted, *expected, "{input}");
        assert_eq!(count, expected.matches(MASK).count(), "{input}");
    }
}

#[test]
fn words_that_resemble_tokens_are_kept() {
    assert_kept(&[
        "AKIA is a prefix; AKIAshort",
        "ghp_token = None",
        "task-manager risk-adjusted-returns-for-the-long-run",
        "sk-learn sk-some-long-hyphenated-identifier-name",
        "hf_hub_download(repo_id)",
        "tl_abc",
        "eyJhbGci alone",
        "the bearer of good news",
        "xoxo",
    ]);
}

#[test]
fn authorization_headers_and_bearer_tokens_are_masked() {
    assert_eq!(
        text("curl -H 'Authorization: Bearer abcdef0123456789xyz' https://api"),
        "curl -H 'Authorization: Bearer ***' https://api"
    );
    assert_eq!(text("Authorization: Basic dXNlcjpwYXNzd29yZA=="), "Authorization: Basic ***");
    assert_eq!(
        text("headers = {\"Authorization\": \"token 0123456789abcdef\"}"),
        "headers = {\"Authorization\": \"token ***\"}"
    );
    assert_eq!(text("send('Bearer AbCdEf0123456789._-x')"), "send('Bearer ***')");
    assert_kept(&[
        "Authorization: Bearer $TOKEN",
        "headers = {\"Authorization\": f\"Bearer {token}\"}",
        "\"Authorization\": \"Bearer \" + token",
    ]);
}

#[test]
fn secret_assignments_in_code_and_config_are_masked() {
    let cases = [
        ("+password = \"hunter2\"", "+password = \"***\""),
        ("-token = 'tok-in-diff-999'", "-token = '***'"),
        ("API_KEY=abc123", "API_KEY=***"),
        ("export HF_TOKEN=hfvalue", "export HF_TOKEN=***"),
        ("  \"token\": \"abc\",", "  \"token\": \"***\","),
        ("{'client_secret': 'x1'}", "{'client_secret': '***'}"),
        ("secret: s3cr3t", "secret: ***"),
        ("  db_password: hunter2  # production", "  db_password: ***  # production"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = ***"),
        ("SECRET_KEY = 'django-insecure-x'", "SECRET_KEY = '***'"),
        ("api_key = abcdef123456", "api_key = ***"),
        ("--token abc123 --lr 0.1", "--token *** --lr 0.1"),
        ("run --password \"p w\"", "run --password \"***\""),
        ("session_cookie := \"c\"", "session_cookie := \"***\""),
    ];
    for (input, expected) in cases {
        assert_eq!(redact_text(input), (expected.to_owned(), 1), "{input}");
    }
}

#[test]
fn code_and_config_without_literal_secrets_are_kept() {
    assert_kept(&[
        "token = get_token()",
        "password = os.environ[\"PASSWORD\"]",
        "login(user, password=password)",
        "client(api_key=args.api_key, retries=3)",
        "token = None",
        "api_key: str",
        "def f(token: str = None):",
        "token: Optional[str] = None",
        "{\"token\": token}",
        "password: ${{ secrets.DB_PASSWORD }}",
        "API_KEY=$(cat /run/key)",
        "token_file = \"/run/secrets/token\"",
        "token: /var/run/secrets/tokens/vault",
        "pad_token = \"<pad>\"",
        "sep_token = \"[SEP]\"",
        "password = \"\"",
        "password = \"***\"",
        "max_tokens = 512",
        "num_pass = 3",
        "if password == \"\":",
        "if password != other:",
        "token = tokens[i]",
        "token = args.hf_token2",
        "key = \"train/loss\"",
        "sort_key: name",
        "secretName: db-credentials",
        "token_type: bearer",
        "tokenizer = AutoTokenizer.from_pretrained(name)",
        "keyframes = 3",
        "diff --git a/secrets.py b/secrets.py",
        "@@ -1,3 +1,4 @@ def main():",
        "+    lr = 0.1",
        "assert_eq!(redact(&[\"--password=\"]), [\"--password=\"]);",
        "{\"total\": true, \"page_token\": \"40\"}",
        "eos_token: \"im_end\"",
        "sky jobs launch task.yaml --secret TRAINLOG_API_KEY",
        "export TRAINLOG_API_KEY=tl_…",
        "token = \"HF_TOKEN\"",
    ]);
}

#[test]
fn secrets_in_a_diff_are_masked_and_counted() {
    let diff = "\
diff --git a/train.py b/train.py
index 1234567..89abcde 100644
--- a/train.py
+++ b/train.py
@@ -1,3 +1,5 @@
 import os
-lr = 0.1
+lr = 0.2
+WANDB_API_KEY = \"0123456789abcdef0123\"
+client = OpenAI(api_key=\"sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn\")
 model.fit(max_tokens=512)
";
    let (redacted, count) = redact_text(diff);
    assert_eq!(count, 2, "{redacted}");
    assert!(redacted.contains("+WANDB_API_KEY = \"***\"\n"), "{redacted}");
    assert!(redacted.contains("+client = OpenAI(api_key=\"***\")\n"), "{redacted}");
    assert!(redacted.contains("-lr = 0.1\n+lr = 0.2\n") && redacted.contains(" model.fit(max_tokens=512)\n"));
    assert!(!redacted.contains("0123456789abcdef0123") && !redacted.contains("sk-proj"), "{redacted}");
}

#[test]
fn non_ascii_text_is_kept_whole() {
    assert_kept(&["é€ 日本語 ✓", "mot_de_passe = é"]);
    assert_eq!(text("password = \"é€\" é"), "password = \"***\" é");
}
