//! Names for the strings that identify things: who a user is (`Issuer`, `Subject`, together a
//! `UserRef`), and the ids of elicitations, connections, providers and API clients. Each is its
//! own type so that a function taking two of them cannot be called with them swapped, and so
//! that "is this the same user" is answered in one place (`UserRef`).
//!
//! They are transparent: the same JSON string and the same database text as before. They check
//! nothing on their own; input from outside is still validated where it enters (e.g.
//! `api::validate_subject`, `elicitations::is_valid_id`). They deref to `str`, so code that
//! reads them as text keeps working while the types spread.

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
}
