//! Names for the strings that identify things: who a user is (`Issuer`, `Subject`, together a
//! `UserRef`), and the ids of elicitations, connections, providers and API clients. Each is its
//! own type so that a function taking two of them cannot be called with them swapped, and so
//! that "is this the same user" is answered in one place (`UserRef`).
//!
//! They are transparent: the same JSON string and the same database text. Input from outside
//! goes through `parse` where a rule exists ([`Subject::parse`], [`ElicitationId::parse`],
//! [`ConnectionId::parse`]), which refuses with an [`InvalidId`] the surface turns into its 400;
//! `new` and `From` wrap values already trusted (read back from the database, or made here).
//! They deref to `str`, so code that reads them as text keeps working.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
            sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        /// For rows built in unit tests with `..Default::default()`; outside tests an empty id
        /// is never made.
        #[cfg(test)]
        impl Default for $name {
            fn default() -> Self {
                Self(String::new())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(s: $name) -> String {
                s.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }
    };
}

string_id!(
    /// The identity issuer a user signed in at (the `iss` of their token).
    Issuer
);
string_id!(
    /// A user's `sub` at their issuer. Unique only together with the issuer: see `UserRef`.
    Subject
);
string_id!(
    /// The id of an elicitation (random, URL-safe; also the path segment of `/connect/{id}`).
    ElicitationId
);
string_id!(
    /// The id of a connection (one user's grant at one provider).
    ConnectionId
);
string_id!(
    /// A configured provider's name (`[providers.NAME]`).
    ProviderName
);
string_id!(
    /// A configured API client's id (`[[clients]] id`).
    ClientId
);

/// A value from outside that is not a valid id of its kind; the message says the rule, never the
/// value, and is what the API answers with (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidId(&'static str);

/// The longest subject, in characters.
pub const MAX_SUBJECT_CHARS: usize = 255;

/// What [`Subject::parse`] accepts, as the OpenAPI document states it (ECMA-262, also read by
/// Python's `re`): no control character (Unicode `Cc`), and at least one character that is
/// neither control nor whitespace. The explicit whitespace set is Rust's `char::is_whitespace`
/// minus the control characters (checked by a test).
pub const SUBJECT_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$";

impl Subject {
    /// A subject from outside (an API request, a verified token's `sub`). Subjects come from
    /// validated MCP access tokens; still, bound them: 1 to 255 characters, not only whitespace,
    /// no control characters.
    pub fn parse(subject: &str) -> Result<Self, InvalidId> {
        if subject.trim().is_empty()
            || subject.chars().count() > MAX_SUBJECT_CHARS
            || subject.chars().any(char::is_control)
        {
            return Err(InvalidId(
                "subject must be 1 to 255 characters, not only whitespace, without control characters",
            ));
        }
        Ok(Self::new(subject))
    }
}

/// The shape of the random ids this service hands out (elicitations, connections): 16 to 64
/// URL-safe characters. Checked before an id from a URL or body reaches the database.
fn is_random_id(id: &str) -> bool {
    (16..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ElicitationId {
    pub fn parse(id: &str) -> Result<Self, InvalidId> {
        if is_random_id(id) {
            Ok(Self::new(id))
        } else {
            Err(InvalidId("not an elicitation id"))
        }
    }
}

impl ConnectionId {
    pub fn parse(id: &str) -> Result<Self, InvalidId> {
        if is_random_id(id) {
            Ok(Self::new(id))
        } else {
            Err(InvalidId("not a connection id"))
        }
    }
}

/// One user: a subject is only meaningful at its issuer, so two users are the same exactly when
/// both match. Every "is this the same user" check goes through here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserRef {
    pub issuer: Issuer,
    pub subject: Subject,
}

impl UserRef {
    pub fn new(issuer: impl Into<Issuer>, subject: impl Into<Subject>) -> Self {
        Self {
            issuer: issuer.into(),
            subject: subject.into(),
        }
    }

    /// Whether `issuer` and `subject` name this user, without building a second `UserRef`.
    pub fn is(&self, issuer: &str, subject: &str) -> bool {
        self.issuer == issuer && self.subject == subject
    }
}

impl fmt::Display for UserRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.subject, self.issuer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_the_same_only_when_issuer_and_subject_both_match() {
        let alice = UserRef::new("https://id.example", "alice");
        assert_eq!(alice, UserRef::new("https://id.example", "alice"));
        assert!(alice.is("https://id.example", "alice"));
        assert_ne!(alice, UserRef::new("https://other.example", "alice"));
        assert!(!alice.is("https://other.example", "alice"));
        assert_ne!(alice, UserRef::new("https://id.example", "bob"));
        assert!(!alice.is("https://id.example", "Alice"));
    }

    #[test]
    fn ids_are_plain_strings_on_the_wire() {
        let id = ElicitationId::new("abc");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"abc\"");
        let back: ProviderName = serde_json::from_str("\"github\"").unwrap();
        assert_eq!(back, "github");
        assert_eq!(back.to_string(), "github");
    }

    #[test]
    fn subject_rules_match_the_documented_pattern() {
        // The pattern's whitespace set is exactly the non-control whitespace of Rust.
        let ws: Vec<u32> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| c.is_whitespace() && !c.is_control())
            .map(u32::from)
            .collect();
        let mut documented = vec![0x20, 0xa0, 0x1680];
        documented.extend(0x2000..=0x200a);
        documented.extend([0x2028, 0x2029, 0x202f, 0x205f, 0x3000]);
        assert_eq!(ws, documented);
        for c in documented.iter().filter_map(|&u| char::from_u32(u)) {
            assert!(
                SUBJECT_PATTERN.contains(&format!("\\u{:04x}", u32::from(c)))
                    || (0x2001..0x200a).contains(&u32::from(c)),
                "{c:?}"
            );
        }
        // The control ranges of the pattern are exactly Unicode Cc.
        let cc: Vec<u32> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control())
            .map(u32::from)
            .collect();
        let expected: Vec<u32> = (0..=0x1f).chain(0x7f..=0x9f).collect();
        assert_eq!(cc, expected);

        assert!(Subject::parse("alice").is_ok());
        assert!(Subject::parse(" alice ").is_ok());
        assert!(
            Subject::parse(&"é".repeat(255)).is_ok(),
            "characters, not bytes"
        );
        for bad in [
            "",
            " ",
            "\u{3000}\u{a0}",
            "al\nice",
            "a\u{85}",
            &"a".repeat(256),
        ] {
            assert!(Subject::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn random_ids_parse_only_in_their_shape() {
        let ok = "abcdefghijklmnop_-09";
        assert_eq!(ElicitationId::parse(ok).unwrap(), ok);
        assert_eq!(ConnectionId::parse(ok).unwrap(), ok);
        for bad in [
            "",
            "short",
            "abcdefghijklmnop/",
            &"a".repeat(65),
            "abcdefghijklmnop q",
        ] {
            assert!(ElicitationId::parse(bad).is_err(), "{bad:?}");
            assert!(ConnectionId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
