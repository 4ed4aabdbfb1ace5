//! Newtypes for identifiers and keys, each validated once when it is built.

use crate::limits::{
    check_len, MAX_ARTIFACT_PATH_CHARS, MAX_KEY_CHARS, MAX_NAME_CHARS, MAX_RUN_ID_CHARS, MAX_VIEW_NAME_CHARS,
};
use crate::{Error, Result};
use std::fmt;

macro_rules! string_newtype {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

/// A run's id: 1 to 64 characters from `[A-Za-z0-9_-]`, safe inside an object path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(String);
string_newtype!(RunId);

impl RunId {
    pub const MAX_LEN: usize = MAX_RUN_ID_CHARS;

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(Error::new(
                field,
                format!("a run id has at least 1 and at most {} characters, got {}", Self::MAX_LEN, s.len()),
            ));
        }
        if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(Error::new(field, "a run id may only hold letters, digits, '_' and '-'"));
        }
        Ok(Self(s.to_owned()))
    }

    /// Wraps a value read back from our own storage, where it was validated on the way in.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

fn check_text(field: &str, s: &str, what: &str, max: usize) -> Result<()> {
    if s.is_empty() {
        return Err(Error::new(field, format!("{what} must not be empty")));
    }
    check_len(field, what, s, max)?;
    if s.chars().any(char::is_control) {
        return Err(Error::new(field, format!("{what} must not contain control characters")));
    }
    if s.trim() != s {
        return Err(Error::new(field, format!("{what} must not start or end with whitespace")));
    }
    Ok(())
}

/// A project's name (also a registered model's): 1 to 500 characters of printable text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectName(String);
string_newtype!(ProjectName);

impl ProjectName {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        check_text(field, s, "a project name", MAX_NAME_CHARS)?;
        Ok(Self(s.to_owned()))
    }
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A saved view's name: 1 to 100 characters, no control characters, not only whitespace.
/// Spaces at either end are kept: the name is the UI's, as typed.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ViewName(String);
string_newtype!(ViewName);

impl ViewName {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        if s.is_empty() {
            return Err(Error::new(field, "a view name must not be empty"));
        }
        check_len(field, "a view name", s, MAX_VIEW_NAME_CHARS)?;
        if s.chars().any(char::is_control) {
            return Err(Error::new(field, "a view name must not contain control characters"));
        }
        if s.trim().is_empty() {
            return Err(Error::new(field, "a view name must not be only whitespace"));
        }
        Ok(Self(s.to_owned()))
    }
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A metric key such as `train/loss` or `sys/gpu.0.util`: 1 to 250 characters of printable text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricKey(String);
string_newtype!(MetricKey);

impl MetricKey {
    pub const MAX_LEN: usize = MAX_KEY_CHARS;
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        check_text(field, s, "a metric key", Self::MAX_LEN)?;
        Ok(Self(s.to_owned()))
    }
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A param key; nested configs are flattened into dotted keys such as `model.depth`. 1 to 250
/// characters of printable text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamKey(String);
string_newtype!(ParamKey);

impl ParamKey {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        check_text(field, s, "a param key", MAX_KEY_CHARS)?;
        Ok(Self(s.to_owned()))
    }
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A tag key: 1 to 250 characters of printable text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagKey(String);
string_newtype!(TagKey);

impl TagKey {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        check_text(field, s, "a tag key", MAX_KEY_CHARS)?;
        Ok(Self(s.to_owned()))
    }
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A file's path inside a run's artifacts: relative, `/`-separated, no empty, `.` or `..`
/// segment, no NUL, backslash or control character; at most 1024 characters.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactPath(String);
string_newtype!(ArtifactPath);

impl ArtifactPath {
    pub const MAX_LEN: usize = MAX_ARTIFACT_PATH_CHARS;
    /// Under a file name's limit on common filesystems (255 bytes), with room for the suffix a
    /// local store gives a file while it is written.
    pub const MAX_SEGMENT_BYTES: usize = 240;

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        let chars = s.chars().count();
        if s.is_empty() || chars > Self::MAX_LEN {
            return Err(Error::new(
                field,
                format!("an artifact path has at least 1 and at most {} characters, got {chars}", Self::MAX_LEN),
            ));
        }
        if s.starts_with('/') {
            return Err(Error::new(field, "an artifact path must be relative, not start with '/'"));
        }
        if s.contains('\\') || s.chars().any(char::is_control) {
            return Err(Error::new(field, "an artifact path must not contain backslashes, NUL or control characters"));
        }
        if s.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
            return Err(Error::new(field, "an artifact path must not contain empty, '.' or '..' segments"));
        }
        // Each segment is a file or folder name where the store is a local folder.
        if let Some(long) = s.split('/').find(|seg| seg.len() > Self::MAX_SEGMENT_BYTES) {
            return Err(Error::new(
                field,
                format!(
                    "each part of an artifact path may have at most {} bytes (a file name's limit), one has {}",
                    Self::MAX_SEGMENT_BYTES,
                    long.len()
                ),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }
}

/// A name's debug form is its text, quoted, as a `String`'s: messages that print one with `{:?}`
/// never show the type (`ProjectName("x")`).
macro_rules! debug_as_text {
    ($($name:ident),*) => {$(
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }
    )*};
}
debug_as_text!(RunId, ProjectName, ViewName, MetricKey, ParamKey, TagKey, ArtifactPath);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_names_are_short_printable_and_not_blank() {
        for good in ["best runs", " spaced ", "é/ü", &"x".repeat(100)] {
            assert_eq!(ViewName::parse("view", good).unwrap().as_str(), good);
        }
        for bad in ["", "   ", "a\nb", "tab\t", "\u{7f}", &"x".repeat(101)] {
            assert_eq!(ViewName::parse("view", bad).unwrap_err().field, "view", "{bad:?}");
        }
    }

    #[test]
    fn names_print_as_their_quoted_text() {
        let name = ProjectName::parse("project", "secret").unwrap();
        assert_eq!(format!("project {name:?}"), "project \"secret\"");
        assert_eq!(format!("{:?}", RunId::parse("id", "r1").unwrap()), "\"r1\"");
    }

    #[test]
    fn run_ids_are_path_safe() {
        assert!(RunId::parse("id", "abc-DEF_123").is_ok());
        for bad in ["", "../x", "a/b", "a b", "é", &"x".repeat(65)] {
            let err = RunId::parse("id", bad).unwrap_err();
            assert_eq!(err.field, "id");
        }
    }

    #[test]
    fn artifact_paths_refuse_traversal_absolute_paths_and_nul() {
        assert!(ArtifactPath::parse("path", "checkpoints/step-10/model.pt").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a/./b", "a//b", "a/", "a\0b", "a\\b", &"x".repeat(1025)] {
            assert_eq!(ArtifactPath::parse("path", bad).unwrap_err().field, "path", "{bad:?}");
        }
    }

    #[test]
    fn keys_refuse_control_characters_and_padding() {
        assert!(MetricKey::parse("key", "train/loss").is_ok());
        assert!(MetricKey::parse("key", "a\nb").is_err());
        assert!(MetricKey::parse("key", " loss").is_err());
        assert!(MetricKey::parse("key", "").is_err());
        assert!(MetricKey::parse("key", &"k".repeat(251)).is_err());
    }

    /// Asserts that `parse` accepts `max` characters and refuses `max + 1` naming the field and the limit.
    fn assert_boundary<T: fmt::Debug>(parse: impl Fn(&str, &str) -> Result<T>, max: usize) {
        assert!(parse("field", &"a".repeat(max)).is_ok(), "{max} characters are accepted");
        let error = parse("field", &"a".repeat(max + 1)).unwrap_err();
        assert_eq!(error.field, "field");
        assert!(error.reason.contains(&format!("at most {max}")), "{error}");
    }

    #[test]
    fn each_identifier_is_accepted_at_its_limit_and_refused_one_character_past_it() {
        assert_boundary(RunId::parse, MAX_RUN_ID_CHARS);
        assert_boundary(ProjectName::parse, MAX_NAME_CHARS);
        assert_boundary(MetricKey::parse, MAX_KEY_CHARS);
        assert_boundary(ParamKey::parse, MAX_KEY_CHARS);
        assert_boundary(TagKey::parse, MAX_KEY_CHARS);
        // A path's folders, each at the segment limit, up to the path's limit.
        let segment = "a".repeat(ArtifactPath::MAX_SEGMENT_BYTES);
        let longest = [segment.as_str(); 5].join("/")[..MAX_ARTIFACT_PATH_CHARS].to_owned();
        assert!(ArtifactPath::parse("path", &longest).is_ok());
        let error = ArtifactPath::parse("path", &format!("{longest}b")).unwrap_err();
        assert!(error.reason.contains(&format!("at most {MAX_ARTIFACT_PATH_CHARS}")), "{error}");
        let error = ArtifactPath::parse("path", &format!("{segment}a")).unwrap_err();
        assert!(error.reason.contains("at most 240 bytes"), "{error}");
        // Characters, not bytes: 1,024 two-byte characters in 240-byte segments are accepted.
        let wide = vec!["é".repeat(120); 9].join("/");
        assert!(
            ArtifactPath::parse("path", &wide[..wide.char_indices().nth(1024).map_or(wide.len(), |(i, _)| i)]).is_ok()
        );
    }
}
