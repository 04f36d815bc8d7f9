//! Enums whose values have fixed names: stored in the database (a connection's status), or
//! carried by answers and audit rows (an error's code). `named_enum!` declares one from a single
//! list of its values.

/// An enum whose every value has a fixed name: its variant's name in snake_case (`NeedsReauth`
/// is `needs_reauth`, as serde's `rename_all = "snake_case"` spells it), or the name written
/// beside it (`KeysRotated = "keys.rotated"`). `as_str` gives the name, and `FromStr` /
/// `TryFrom<&str>` take one back, a name this binary does not know being an error that names it
/// (`unknown connection status "paused"`), never a default. `ALL` lists every value.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $($(#[$doc:meta])* $variant:ident $(= $text:literal)?,)*
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &[$name] = &[$(Self::$variant,)*];

            /// The value's name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $crate::names::named_enum!(@name $variant $($text)?),)*
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> std::result::Result<Self, String> {
                Self::ALL
                    .iter()
                    .find(|v| v.as_str() == s)
                    .copied()
                    .ok_or_else(|| format!(concat!("unknown ", $what, " {:?}"), s))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = String;

            fn try_from(s: &str) -> std::result::Result<Self, String> {
                s.parse()
            }
        }
    };
    (@name $variant:ident $text:literal) => {
        $text
    };
    (@name $variant:ident) => {{
        const BYTES: [u8; $crate::names::snake_case_len(stringify!($variant))] =
            $crate::names::snake_case(stringify!($variant));
        const NAME: &str = match std::str::from_utf8(&BYTES) {
            Ok(name) => name,
            Err(_) => panic!("a variant's name is ASCII"),
        };
        NAME
    }};
}

pub(crate) use named_enum;

/// The length of `name` (`CamelCase`, ASCII) in snake_case: one more byte for each capital
/// after the first letter.
pub(crate) const fn snake_case_len(name: &str) -> usize {
    let b = name.as_bytes();
    let (mut len, mut i) = (b.len(), 1);
    while i < b.len() {
        if b[i].is_ascii_uppercase() {
            len += 1;
        }
        i += 1;
    }
    len
}

/// `name` (`CamelCase`, ASCII) in snake_case, `N` being `snake_case_len(name)`: evaluated at
/// compile time, so a name costs nothing at run time.
pub(crate) const fn snake_case<const N: usize>(name: &str) -> [u8; N] {
    let b = name.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j) = (0, 0);
    while i < b.len() {
        if i > 0 && b[i].is_ascii_uppercase() {
            out[j] = b'_';
            j += 1;
        }
        out[j] = b[i].to_ascii_lowercase();
        i += 1;
        j += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    named_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Sample ("sample") {
            One,
            NeedsReauth,
            Dotted = "x.dotted",
        }
    }

    #[test]
    fn a_name_is_the_snake_case_variant_unless_one_is_written() {
        let names: Vec<_> = Sample::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, ["one", "needs_reauth", "x.dotted"]);
        assert_eq!("needs_reauth".parse(), Ok(Sample::NeedsReauth));
        assert_eq!(Sample::try_from("x.dotted"), Ok(Sample::Dotted));
        assert_eq!(
            "NeedsReauth".parse::<Sample>(),
            Err(r#"unknown sample "NeedsReauth""#.to_owned())
        );
    }
}
