//! Redaction of secrets from the text a run records by itself: command lines, URLs, diffs.
//!
//! The SDK redacts before it sends and the server again when it stores, with this same code, so
//! a run recorded by an older client or a raw API call keeps no secret in clear either. Each
//! function answers the redacted text and how many secrets it masked. Redacting twice masks
//! nothing more: a [`MASK`] is never taken for a secret.
//!
//! # Names
//!
//! A *name* (a flag, an override, a query parameter, the left side of an assignment) is split
//! into words on `-`, `_`, `.` and where a lower-case letter or digit meets an upper-case one
//! (`apiKey` → `api`, `key`), and compared in lower case.
//!
//! On command lines and in URLs ([`is_secret_name`]) a name is secret when:
//!
//! - any word is one of [`SECRET_WORDS`] (`password`, `passwd`, `pwd`, `passphrase`, `secret`,
//!   `token`, `credential`, `credentials`, `signature`), or ends with one of the longer of them
//!   (`dbpassword`, `apitoken`, `clientsecret`); plurals such as `tokens` do not count, so
//!   `--max-tokens 512` is kept;
//! - or its *last* word is one of [`LAST_WORD_SECRETS`] (`key`, `sig`, `auth`, `authorization`,
//!   `pass`, `pw`, `bearer`, `cookie`, `jwt`), or is `key` glued to one of [`KEY_PREFIXES`]
//!   (`apikey`, `accesskey`, `privatekey`). These words count only at the end, where they name
//!   what the value is: `--api-key` holds a key, `--key-frames` and `--auth-mode` do not, and
//!   `--keyframes` is one word that is not a secret.
//!
//! In other text (diffs, configuration, code: [`is_secret_assignment_name`]) the rule is
//! narrower, since names such as `token_type`, `secret_name` or `sort_key` are common there and
//! hold no secret: the *last* word must be one of [`SECRET_WORDS`] (or end with one of the
//! longer of them), `pass`, `pw`, `bearer`, `cookie` or `jwt`, or be `key` after one of
//! [`KEY_PREFIXES`] (`api_key`, `SECRET_KEY`, `aws_secret_access_key`, `apikey`); and `token`
//! after a word of pagination or of tokenizers (`page_token`, `eos_token`) does not count.
//!
//! # Command lines ([`redact_command_line`])
//!
//! The value of a secret flag becomes [`MASK`], the flag itself is kept: `--password=x` and
//! `-password=x` become `--password=***` and `-password=***`; in `--api-key x`, the next argument
//! becomes `***` unless it starts with `-` (then it is the next flag, and the secret flag had no
//! value). An argument `name=value` whose name is secret (`db.password=x`, `db.pass=x`,
//! `+wandb.api_key=x`, as Hydra overrides are written) keeps its name too.
//!
//! `-p` is taken for a password flag, as `mysql`, `mysqldump` and `sshpass` read it: its value,
//! glued (`-phunter2` → `-p***`) or in the next argument (`-p hunter2` → `-p ***`), is masked
//! whatever it is, a port number or a probability too. That loses a harmless value now and then;
//! keeping it would store passwords.
//!
//! Every other argument, and the value of every other flag, is redacted as text (below): a
//! connection string `host=db user=u password=hunter2` loses its password, a token of a known
//! shape given under any flag is masked.
//!
//! # Text ([`redact_text`])
//!
//! In any text, in this order:
//!
//! - a PEM private key block (`-----BEGIN … PRIVATE KEY-----` to its `-----END … PRIVATE
//!   KEY-----`, or to the end of the text when it is cut) becomes one `***`;
//! - in every URL (`scheme://…`, ended by whitespace or a quote), a password is masked
//!   (`postgres://user:***@host`), a user name alone is masked for http(s) and ws(s), where it is
//!   usually a token (`https://***@host`), and kept for other schemes (`ssh://git@host`); query
//!   and fragment parameters with a secret name get the value `***` (`?X-Amz-Signature=***`);
//! - the credentials of an `Authorization:` header (`Authorization: Bearer ***`) and any token
//!   of 16 characters or more after `Bearer `;
//! - the value of a secret flag written out (`--token abc`, `--password "x"`);
//! - assignments whose name is secret by the narrower rule above:
//!   - a quoted value is masked inside its quotes (`password = "***"`, `"token": "***"`,
//!     `api_key: '***'`);
//!   - an unquoted value right after `=` (`API_KEY=***`, `export TOKEN=***`, libpq's
//!     `password=***`) is masked, unless a `,` or `)` follows it (a keyword argument in code,
//!     `login(password=password)`);
//!   - an unquoted value after ` = ` is masked when it looks generated: 8 characters or more,
//!     letters and digits, no call, index or dotted name (`token = get_token()` is code);
//!   - an unquoted value after `:` is masked when it ends the line (YAML's `secret: ***`,
//!     a comment may follow), unless it is a type (`token: str`);
//!   - never masked: empty values, `None`, `null`, `true`, `false` and the like, numbers,
//!     references (`$TOKEN`, `${TOKEN}`, `{token}`, `<your key>`, `[MASK]`), names of
//!     environment variables (`HF_TOKEN`), paths (`/run/secrets/token`), placeholders (`xxx`,
//!     `tl_…`) and values already masked;
//! - tokens of a known shape wherever they stand: AWS access key ids (`AKIA…`, `ASIA…`),
//!   GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), Slack tokens
//!   (`xoxb-` and kin), `sk-…` keys (OpenAI, Anthropic) and Stripe's `sk_live_`/`rk_live_`,
//!   Hugging Face tokens (`hf_…`), Google API keys (`AIza…`), JWTs (`eyJ….eyJ….…`), and
//!   trainlog's own keys, whose id is kept (`tl_3f9c0a12b4de_***`).

mod text;
mod urls;

pub use text::redact_text;
pub use urls::redact_urls;

/// What a secret value is replaced with.
pub const MASK: &str = "***";

/// Words that make a name secret wherever they are in it.
pub const SECRET_WORDS: &[&str] =
    &["password", "passwd", "pwd", "passphrase", "secret", "token", "credential", "credentials", "signature"];

/// Words that make a name secret only as its last word.
pub const LAST_WORD_SECRETS: &[&str] =
    &["key", "sig", "auth", "authorization", "pass", "pw", "bearer", "cookie", "jwt"];

/// The last words that make the name of an assignment secret, besides [`SECRET_WORDS`] and keys.
const ASSIGNMENT_LAST_WORDS: &[&str] = &["pass", "pw", "bearer", "cookie", "jwt"];

/// Words before `token` that make it no secret in an assignment: pagination and the special
/// tokens of tokenizers (`page_token`, `eos_token`).
const PLAIN_TOKEN_QUALIFIERS: &[&str] =
    &["page", "next", "continuation", "cancellation", "pad", "eos", "bos", "unk", "cls", "sep", "mask"];

/// What may stand before `key`, glued or as the word before, in one secret name (`apikey`,
/// `access_key`).
pub const KEY_PREFIXES: &[&str] =
    &["api", "access", "private", "secret", "auth", "ssh", "signing", "master", "encryption", "client", "account"];

/// Secret words long enough to be recognised at the end of a glued word (`dbpassword`).
const GLUED_SECRET_WORDS: &[&str] = &["password", "passwd", "passphrase", "secret", "token"];

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

fn is_secret_word(word: &str) -> bool {
    SECRET_WORDS.contains(&word) || GLUED_SECRET_WORDS.iter().any(|secret| word.ends_with(secret))
}

fn is_glued_key(word: &str) -> bool {
    word.strip_suffix("key").is_some_and(|prefix| KEY_PREFIXES.contains(&prefix))
}

/// Whether a flag, override or query parameter name holds a secret (see the module's rule).
pub fn is_secret_name(name: &str) -> bool {
    let words = words(name);
    let any_word_is_secret = words.iter().any(|word| is_secret_word(word));
    let last_word_is_secret =
        words.last().is_some_and(|last| LAST_WORD_SECRETS.contains(&last.as_str()) || is_glued_key(last));
    any_word_is_secret || last_word_is_secret
}

/// Whether the name of an assignment in text holds a secret (the module's narrower rule).
pub fn is_secret_assignment_name(name: &str) -> bool {
    let words = words(name);
    let Some(last) = words.last().map(String::as_str) else {
        return false;
    };
    let before_last = words.len().checked_sub(2).map(|i| words[i].as_str());
    if last == "token" && before_last.is_some_and(|word| PLAIN_TOKEN_QUALIFIERS.contains(&word)) {
        return false;
    }
    is_secret_word(last)
        || ASSIGNMENT_LAST_WORDS.contains(&last)
        || is_glued_key(last)
        || (last == "key" && before_last.is_some_and(|word| KEY_PREFIXES.contains(&word)))
}

/// A command line with the values of secret flags and overrides masked and every other
/// argument redacted as text (see the module's rule), and how many secrets were masked. Every
/// argument stays in its place.
pub fn redact_command_line(args: &[String]) -> (Vec<String>, usize) {
    let mut redacted = Vec::with_capacity(args.len());
    let mut count = 0;
    let mut next_is_secret_value = false;
    let text = |arg: &str, count: &mut usize| {
        let (arg, found) = redact_text(arg);
        *count += found;
        arg
    };
    for arg in args {
        let looks_like_flag = arg.len() > 1 && arg.starts_with('-');
        if next_is_secret_value && !looks_like_flag {
            next_is_secret_value = false;
            if arg != MASK {
                count += 1;
            }
            redacted.push(MASK.to_owned());
            continue;
        }
        next_is_secret_value = false;
        if looks_like_flag {
            let long = arg.starts_with("--");
            let (dashes, flag) = arg.split_at(if long { 2 } else { 1 });
            let name = flag.split_once('=').map_or(flag, |(name, _)| name);
            if is_secret_name(name) {
                match flag.split_once('=') {
                    Some((name, value)) if !value.is_empty() && value != MASK => {
                        redacted.push(format!("{dashes}{name}={MASK}"));
                        count += 1;
                    }
                    Some(_) => redacted.push(arg.clone()),
                    None => {
                        next_is_secret_value = true;
                        redacted.push(arg.clone());
                    }
                }
            } else if !long && flag == "p" {
                next_is_secret_value = true;
                redacted.push(arg.clone());
            } else if !long && flag.starts_with('p') && &flag[1..] != MASK {
                redacted.push(format!("-p{MASK}"));
                count += 1;
            } else {
                match flag.split_once('=') {
                    Some((name, value)) => redacted.push(format!("{dashes}{name}={}", text(value, &mut count))),
                    None => redacted.push(text(arg, &mut count)),
                }
            }
            continue;
        }
        match arg.split_once('=') {
            Some((name, value))
                if is_override_name(name) && is_secret_name(name) && !value.is_empty() && value != MASK =>
            {
                redacted.push(format!("{name}={MASK}"));
                count += 1;
            }
            _ => redacted.push(text(arg, &mut count)),
        }
    }
    (redacted, count)
}

/// Whether `name` in an argument `name=value` is a config key (`db.password`, `+trainer.key`),
/// not the start of some other text that happens to hold `=`.
fn is_override_name(name: &str) -> bool {
    let key = name.trim_start_matches(['+', '~']);
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'))
}

#[cfg(test)]
mod tests;
