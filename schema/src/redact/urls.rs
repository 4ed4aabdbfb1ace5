//! The credentials of URLs found in text: passwords, token user names, secret query parameters.

use super::{is_secret_name, MASK};

/// Schemes whose lone user name is a token, not an account.
const TOKEN_USER_SCHEMES: &[&str] = &["http", "https", "ws", "wss"];

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// `text` with every URL in it redacted: passwords, token user names and secret query or
/// fragment parameters masked (see the module's rule), and how many were masked. Text around
/// the URLs is kept as is.
pub fn redact_urls(text: &str) -> (String, usize) {
    if !text.contains("://") {
        return (text.to_owned(), 0);
    }
    let mut redacted = String::with_capacity(text.len());
    let mut count = 0;
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
        redacted.push_str(&redact_url(&rest[scheme_start..separator], &rest[after_separator..url_end], &mut count));
        rest = &rest[url_end..];
    }
    redacted.push_str(rest);
    (redacted, count)
}

/// One URL, given as its scheme and what follows `://`.
fn redact_url(scheme: &str, after_scheme: &str, count: &mut usize) -> String {
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
    let mut url = format!("{scheme}://{}{path}", redact_authority(scheme, authority, count));
    if let Some(query) = query {
        url.push('?');
        url.push_str(&redact_parameters(query, count));
    }
    if let Some(fragment) = fragment {
        url.push('#');
        url.push_str(&redact_parameters(fragment, count));
    }
    url
}

/// `user:pass@host` → `user:***@host`; `token@host` → `***@host` for http(s) and ws(s).
fn redact_authority(scheme: &str, authority: &str, count: &mut usize) -> String {
    let Some(at) = authority.rfind('@') else {
        return authority.to_owned();
    };
    let (userinfo, host) = (&authority[..at], &authority[at + 1..]);
    let base_scheme = scheme.rsplit('+').next().unwrap_or(scheme).to_ascii_lowercase();
    match userinfo.split_once(':') {
        Some((user, password)) if !password.is_empty() && password != MASK => {
            *count += 1;
            format!("{user}:{MASK}@{host}")
        }
        None if !userinfo.is_empty() && userinfo != MASK && TOKEN_USER_SCHEMES.contains(&base_scheme.as_str()) => {
            *count += 1;
            format!("{MASK}@{host}")
        }
        _ => authority.to_owned(),
    }
}

/// `a=1&token=x` → `a=1&token=***`.
fn redact_parameters(parameters: &str, count: &mut usize) -> String {
    parameters
        .split('&')
        .map(|parameter| match parameter.split_once('=') {
            Some((name, value)) if is_secret_name(name) && !value.is_empty() && value != MASK => {
                *count += 1;
                format!("{name}={MASK}")
            }
            _ => parameter.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}
