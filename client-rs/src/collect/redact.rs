//! Redaction of secrets from text the SDK records by itself: command lines, URLs, output lines.
//!
//! # The rule
//!
//! A *name* (a command-line flag, a `name=value` override, a URL query parameter) is split into
//! words on `-`, `_`, `.` and where a lower-case letter or digit meets an upper-case one
//! (`apiKey` → `api`, `key`), and compared in lower case. The name is secret when:
//!
//! - any word is one of [`SECRET_WORDS`] (`password`, `passwd`, `pwd`, `passphrase`, `secret`,
//!   `token`, `credential`, `credentials`, `signature`), or ends with one of the longer of them
//!   (`dbpassword`, `apitoken`, `clientsecret`); plurals such as `tokens` do not count, so
//!   `--max-tokens 512` is kept;
//! - or its *last* word is one of [`LAST_WORD_SECRETS`] (`key`, `sig`, `auth`, `authorization`),
//!   or is `key` glued to one of [`KEY_PREFIXES`] (`apikey`, `accesskey`, `privatekey`). These
//!   words count only at the end, where they name what the value is: `--api-key` holds a key,
//!   `--key-frames` and `--auth-mode` do not, and `--keyframes` is one word that is not a secret.
//!
//! On a command line, the value of a secret flag becomes [`MASK`], the flag itself is kept:
//! `--password=x` and `-password=x` become `--password=***` and `-password=***`; in
//! `--api-key x`, the next argument becomes `***` unless it starts with `-` (then it is the next
//! flag, and the secret flag had no value). An argument `name=value` whose name is secret
//! (`db.password=x`, `+wandb.api_key=x`, as Hydra overrides are written) keeps its name too.
//!
//! In every URL anywhere in a text (`scheme://…`, ended by whitespace or a quote), a password is
//! masked (`postgres://user:***@host`), a user name alone is masked for http(s) and ws(s), where
//! it is usually a token (`https://***@host`), and kept for other schemes (`ssh://git@host`);
//! query and fragment parameters with a secret name get the value `***`
//! (`?X-Amz-Signature=***`, `?access_token=***`).
//!
//! Short flags (`-p hunter2`) cannot be told from others and are kept.

/// What a secret value is replaced with.
pub const MASK: &str = "***";

/// Words that make a name secret wherever they are in it.
pub const SECRET_WORDS: &[&str] =
    &["password", "passwd", "pwd", "passphrase", "secret", "token", "credential", "credentials", "signature"];

/// Words that make a name secret only as its last word.
pub const LAST_WORD_SECRETS: &[&str] = &["key", "sig", "auth", "authorization"];

/// What may stand glued before `key` in one secret word (`apikey`, `accesskey`).
pub const KEY_PREFIXES: &[&str] =
    &["api", "access", "private", "secret", "auth", "ssh", "signing", "master", "encryption", "client", "account"];

/// Secret words long enough to be recognised at the end of a glued word (`dbpassword`).
const GLUED_SECRET_WORDS: &[&str] = &["password", "passwd", "passphrase", "secret", "token"];

/// Schemes whose lone user name is a token, not an account.
const TOKEN_USER_SCHEMES: &[&str] = &["http", "https", "ws", "wss"];

/// The words of a name, in lower case (see the module's rule).
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower_or_digit = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower_or_digit = false;
            continue;
        }
        if c.is_uppercase() && previous_lower_or_digit && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower_or_digit = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// Whether a flag, override or query parameter name holds a secret (see the module's rule).
pub fn is_secret_name(name: &str) -> bool {
    let words = words(name);
    let any_word_is_secret = words.iter().any(|word| {
        SECRET_WORDS.contains(&word.as_str()) || GLUED_SECRET_WORDS.iter().any(|secret| word.ends_with(secret))
    });
    let last_word_is_secret = words.last().is_some_and(|last| {
        LAST_WORD_SECRETS.contains(&last.as_str())
            || last.strip_suffix("key").is_some_and(|prefix| KEY_PREFIXES.contains(&prefix))
    });
    any_word_is_secret || last_word_is_secret
}

/// A command line with the values of secret flags and overrides masked and the credentials of
/// URLs removed (see the module's rule). Every argument stays in its place.
pub fn redact_command_line(args: &[String]) -> Vec<String> {
    let mut redacted = Vec::with_capacity(args.len());
    let mut next_is_secret_value = false;
    for arg in args {
        let looks_like_flag = arg.len() > 1 && arg.starts_with('-');
        if next_is_secret_value && !looks_like_flag {
            next_is_secret_value = false;
            redacted.push(MASK.to_owned());
            continue;
        }
        next_is_secret_value = false;
        if looks_like_flag {
            let name_start = if arg.starts_with("--") { 2 } else { 1 };
            let (dashes, flag) = arg.split_at(name_start);
            match flag.split_once('=') {
                Some((name, value)) if is_secret_name(name) && !value.is_empty() => {
                    redacted.push(format!("{dashes}{name}={MASK}"));
                }
                Some((name, value)) => redacted.push(format!("{dashes}{name}={}", redact_urls(value))),
                None => {
                    next_is_secret_value = is_secret_name(flag);
                    redacted.push(redact_urls(arg));
                }
            }
            continue;
        }
        match arg.split_once('=') {
            Some((name, value)) if is_override_name(name) && is_secret_name(name) && !value.is_empty() => {
                redacted.push(format!("{name}={MASK}"));
            }
            _ => redacted.push(redact_urls(arg)),
        }
    }
    redacted
}

/// Whether `name` in an argument `name=value` is a config key (`db.password`, `+trainer.key`),
/// not the start of some other text that happens to hold `=`.
fn is_override_name(name: &str) -> bool {
    let key = name.trim_start_matches(['+', '~']);
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// `text` with every URL in it redacted: passwords, token user names and secret query or
/// fragment parameters masked (see the module's rule). Text around the URLs is kept as is.
pub fn redact_urls(text: &str) -> String {
    if !text.contains("://") {
        return text.to_owned();
    }
    let mut redacted = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(separator) = rest.find("://") {
        let scheme_start = rest[..separator]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_scheme_char(*c))
            .last()
            .map_or(separator, |(index, _)| index);
        let after_separator = separator + "://".len();
        let is_url = rest[scheme_start..].starts_with(|c: char| c.is_ascii_alphabetic());
        if !is_url {
            redacted.push_str(&rest[..after_separator]);
            rest = &rest[after_separator..];
            continue;
        }
        let url_end = rest[after_separator..].find(ends_url).map_or(rest.len(), |len| after_separator + len);
        redacted.push_str(&rest[..scheme_start]);
        redacted.push_str(&redact_url(&rest[scheme_start..separator], &rest[after_separator..url_end]));
        rest = &rest[url_end..];
    }
    redacted.push_str(rest);
    redacted
}

/// One URL, given as its scheme and what follows `://`.
fn redact_url(scheme: &str, after_scheme: &str) -> String {
    let authority_len = after_scheme.find(['/', '?', '#']).unwrap_or(after_scheme.len());
    let (authority, path_and_after) = after_scheme.split_at(authority_len);
    let (before_fragment, fragment) = match path_and_after.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (path_and_after, None),
    };
    let (path, query) = match before_fragment.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (before_fragment, None),
    };
    let mut url = format!("{scheme}://{}{path}", redact_authority(scheme, authority));
    if let Some(query) = query {
        url.push('?');
        url.push_str(&redact_parameters(query));
    }
    if let Some(fragment) = fragment {
        url.push('#');
        url.push_str(&redact_parameters(fragment));
    }
    url
}

/// `user:pass@host` → `user:***@host`; `token@host` → `***@host` for http(s) and ws(s).
fn redact_authority(scheme: &str, authority: &str) -> String {
    let Some(at) = authority.rfind('@') else {
        return authority.to_owned();
    };
    let (userinfo, host) = (&authority[..at], &authority[at + 1..]);
    let base_scheme = scheme.rsplit('+').next().unwrap_or(scheme).to_ascii_lowercase();
    match userinfo.split_once(':') {
        Some((user, password)) if !password.is_empty() => format!("{user}:{MASK}@{host}"),
        None if !userinfo.is_empty() && TOKEN_USER_SCHEMES.contains(&base_scheme.as_str()) => format!("{MASK}@{host}"),
        _ => authority.to_owned(),
    }
}

/// `a=1&token=x` → `a=1&token=***`.
fn redact_parameters(parameters: &str) -> String {
    parameters
        .split('&')
        .map(|parameter| match parameter.split_once('=') {
            Some((name, value)) if is_secret_name(name) && !value.is_empty() => format!("{name}={MASK}"),
            _ => parameter.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(args: &[&str]) -> Vec<String> {
        redact_command_line(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
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
            "",
        ] {
            assert!(!is_secret_name(name), "{name} should not be secret");
        }
    }

    #[test]
    fn ordinary_arguments_are_untouched() {
        let args =
            ["python", "train.py", "--lr", "0.1", "--keyframes", "3", "--key-frames=4", "-v", "data/", "--", "x"];
        assert_eq!(redact(&args), args);
    }

    #[test]
    fn secret_flag_values_are_masked_in_both_forms() {
        assert_eq!(
            redact(&["train.py", "--api-key", "abc", "--password=x", "-token=t", "-secret", "s", "--lr", "0.1"]),
            ["train.py", "--api-key", "***", "--password=***", "-token=***", "-secret", "***", "--lr", "0.1"]
        );
        assert_eq!(redact(&["--apiKey", "abc", "--DB_PASSWORD=pw"]), ["--apiKey", "***", "--DB_PASSWORD=***"]);
    }

    #[test]
    fn a_secret_flag_followed_by_a_flag_masks_nothing() {
        assert_eq!(redact(&["--use-token", "--lr", "0.1"]), ["--use-token", "--lr", "0.1"]);
        assert_eq!(redact(&["--password="]), ["--password="]);
        assert_eq!(redact(&["--token"]), ["--token"]);
    }

    #[test]
    fn overrides_with_secret_names_are_masked() {
        assert_eq!(
            redact(&["train.py", "db.password=hunter2", "+wandb.api_key=k", "optimizer.lr=0.1", "a == b"]),
            ["train.py", "db.password=***", "+wandb.api_key=***", "optimizer.lr=0.1", "a == b"]
        );
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
        assert_eq!(redact_urls("postgres://user:pass@host:5432/db"), "postgres://user:***@host:5432/db");
        assert_eq!(redact_urls("https://user:p@ss@host/x.git"), "https://user:***@host/x.git");
        assert_eq!(redact_urls("https://ghp_abc123@github.com/org/repo"), "https://***@github.com/org/repo");
        assert_eq!(redact_urls("git+https://tok@github.com/org/pkg"), "git+https://***@github.com/org/pkg");
        assert_eq!(redact_urls("ssh://git@host/x.git"), "ssh://git@host/x.git");
    }

    #[test]
    fn url_query_secrets_are_masked() {
        assert_eq!(
            redact_urls("https://host/a?access_token=xyz&page=2#frag"),
            "https://host/a?access_token=***&page=2#frag"
        );
        assert_eq!(
            redact_urls("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc&X-Amz-Expires=60"),
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60"
        );
        assert_eq!(
            redact_urls("https://acct.blob.core.windows.net/c?sv=1&sig=s%3D"),
            "https://acct.blob.core.windows.net/c?sv=1&sig=***"
        );
        assert_eq!(redact_urls("https://host/cb#access_token=t&state=1"), "https://host/cb#access_token=***&state=1");
        assert_eq!(redact_urls("https://host/a?key=k&apikey=z"), "https://host/a?key=***&apikey=***");
    }

    #[test]
    fn urls_without_credentials_are_untouched() {
        for text in [
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
            assert_eq!(redact_urls(text), text);
        }
    }

    #[test]
    fn urls_inside_longer_text_are_found() {
        assert_eq!(
            redact_urls("connect to 'postgres://a:b@h/db' then é http://x:y@z/?token=t done"),
            "connect to 'postgres://a:***@h/db' then é http://x:***@z/?token=*** done"
        );
    }
}
