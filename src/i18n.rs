//! The languages of the user-facing pages: the message catalogs (Fluent files under `locales/`,
//! compiled in), choosing a language from the remembered switch or `Accept-Language`, dates in
//! the user's locale, and operator texts given per language (`LocalizedText`).
//!
//! Templates and handlers never hold user-facing sentences: they name a catalog key (`Msg`), and
//! the page renders it in the request's language. Admin pages stay English.

use std::fmt;
use std::sync::LazyLock;

use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource, FluentValue};
use serde::Deserialize;
use time::OffsetDateTime;

/// A language the pages are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    En,
    ZhCn,
}

impl Lang {
    pub const ALL: [Lang; 2] = [Lang::En, Lang::ZhCn];

    /// The BCP 47 tag, as in `<html lang>`, the switch and the config.
    pub fn tag(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::ZhCn => "zh-CN",
        }
    }

    /// The language's name in itself, for the switch.
    pub fn native_name(self) -> &'static str {
        match self {
            Self::En => "English",
            Self::ZhCn => "简体中文",
        }
    }

    /// A configured or remembered tag: exactly one of ours (case-insensitive).
    pub fn from_tag(tag: &str) -> Option<Lang> {
        Self::ALL
            .into_iter()
            .find(|l| l.tag().eq_ignore_ascii_case(tag.trim()))
    }

    /// The language that serves a tag from `Accept-Language`: `en*` is English; `zh`, `zh-CN`,
    /// `zh-SG`, `zh-Hans*` are Simplified Chinese. Traditional Chinese (`zh-TW`, `zh-HK`,
    /// `zh-Hant`) is not served by Simplified Chinese; the next preference decides.
    fn serving(tag: &str) -> Option<Lang> {
        let id: unic_langid::LanguageIdentifier = tag.parse().ok()?;
        match id.language.as_str() {
            "en" => Some(Self::En),
            "zh" => {
                let script = id.script.map(|s| s.as_str().to_ascii_lowercase());
                let region = id.region.map(|r| r.as_str().to_ascii_uppercase());
                match (script.as_deref(), region.as_deref()) {
                    (Some("hans"), _) => Some(Self::ZhCn),
                    (Some(_), _) => None,
                    (None, None | Some("CN" | "SG" | "MY")) => Some(Self::ZhCn),
                    (None, Some(_)) => None,
                }
            }
            _ => None,
        }
    }

    /// The best of our languages for an `Accept-Language` header (RFC 9110 §12.5.4), if any of
    /// them is acceptable at all.
    pub fn from_accept_language(header: &str) -> Option<Lang> {
        let mut best: Option<(f32, usize, Lang)> = None;
        for (i, item) in header.split(',').take(32).enumerate() {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let mut q = 1.0f32;
            for p in parts {
                if let Some(v) = p.trim().strip_prefix("q=") {
                    q = v.trim().parse().unwrap_or(0.0);
                }
            }
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            let Some(lang) = Self::serving(tag) else {
                continue;
            };
            // Highest q wins; among equals, the first listed.
            if best.is_none_or(|(bq, bi, _)| q > bq || (q == bq && i < bi)) {
                best = Some((q, i, lang));
            }
        }
        best.map(|(_, _, l)| l)
    }
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

const SOURCES: [(Lang, &str); 2] = [
    (Lang::En, include_str!("../locales/en/main.ftl")),
    (Lang::ZhCn, include_str!("../locales/zh-CN/main.ftl")),
];

struct Catalog {
    bundles: Vec<(Lang, FluentBundle<FluentResource>)>,
}

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    let bundles = SOURCES
        .into_iter()
        .map(|(lang, src)| {
            // A catalog that does not parse is a build defect; the unit tests catch it, and a
            // bad message still renders as its key rather than stopping the service.
            let res = FluentResource::try_new(src.to_owned()).unwrap_or_else(|(res, errors)| {
                tracing::error!(lang = lang.tag(), ?errors, "message catalog has errors");
                res
            });
            let id: unic_langid::LanguageIdentifier = lang.tag().parse().unwrap_or_default();
            let mut bundle = FluentBundle::new_concurrent(vec![id]);
            // Pages are HTML, escaped by the templates; no bidi isolation marks in them.
            bundle.set_use_isolating(false);
            if let Err(errors) = bundle.add_resource(res) {
                tracing::error!(
                    lang = lang.tag(),
                    ?errors,
                    "message catalog has duplicate keys"
                );
            }
            (lang, bundle)
        })
        .collect();
    Catalog { bundles }
});

impl Catalog {
    fn bundle(&self, lang: Lang) -> Option<&FluentBundle<FluentResource>> {
        self.bundles
            .iter()
            .find(|(l, _)| *l == lang)
            .map(|(_, b)| b)
    }

    fn format(&self, lang: Lang, key: &str, args: &[(&str, String)]) -> Option<String> {
        let bundle = self.bundle(lang)?;
        let pattern = bundle.get_message(key)?.value()?;
        let mut fargs = FluentArgs::new();
        for (name, value) in args {
            fargs.set(*name, fluent_value(value));
        }
        let mut errors = Vec::new();
        let text = bundle.format_pattern(pattern, Some(&fargs), &mut errors);
        if !errors.is_empty() {
            tracing::error!(lang = lang.tag(), key, ?errors, "message failed to format");
        }
        Some(text.into_owned())
    }
}

/// An argument as Fluent sees it: a count (plain digits without a leading zero, at most 15 so
/// it stays exact) is a
/// number, so a message can choose its plural form (`{ $seconds -> [one] ... *[other] ... }`);
/// anything else is text. A number prints as the same digits.
fn fluent_value(value: &str) -> FluentValue<'_> {
    let count = (value == "0" || !value.starts_with('0'))
        && (1..=15).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u64>() {
        Ok(n) if count => FluentValue::from(n),
        _ => FluentValue::from(value),
    }
}

/// Renders catalog message `key` in `lang` (English if that language lacks it, the key itself
/// if both do: a test makes sure neither happens).
pub fn tr(lang: Lang, key: &str, args: &[(&str, String)]) -> String {
    CATALOG
        .format(lang, key, args)
        .or_else(|| CATALOG.format(Lang::En, key, args))
        .unwrap_or_else(|| {
            tracing::error!(lang = lang.tag(), key, "message missing from the catalog");
            key.to_owned()
        })
}

/// Whether the catalog of `lang` has `key` (for the built-in scope descriptions).
pub fn has(lang: Lang, key: &str) -> bool {
    CATALOG
        .bundle(lang)
        .is_some_and(|b| b.get_message(key).is_some_and(|m| m.value().is_some()))
}

/// The catalog file of `lang`, as written.
fn source(lang: Lang) -> &'static str {
    SOURCES
        .iter()
        .find(|(l, _)| *l == lang)
        .map(|(_, s)| *s)
        .unwrap_or("")
}

/// Every message id in a language's catalog, as written (the test that both catalogs hold the
/// same keys reads this).
pub fn keys(lang: Lang) -> Vec<String> {
    let res = match FluentResource::try_new(source(lang).to_owned()) {
        Ok(r) => r,
        Err((r, _)) => r,
    };
    let mut keys: Vec<String> = res
        .entries()
        .filter_map(|e| match e {
            fluent_syntax::ast::Entry::Message(m) => Some(m.id.name.to_owned()),
            _ => None,
        })
        .collect();
    keys.sort();
    keys
}

/// Whether a language's catalog parses without errors.
pub fn parse_errors(lang: Lang) -> Vec<String> {
    match FluentResource::try_new(source(lang).to_owned()) {
        Ok(_) => Vec::new(),
        Err((_, errors)) => errors.iter().map(|e| format!("{e:?}")).collect(),
    }
}

/// A sentence to show a user: a catalog key and its arguments, rendered in the reader's language
/// only when the page is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub key: &'static str,
    pub args: Vec<(&'static str, String)>,
}

impl Msg {
    pub fn new(key: &'static str) -> Self {
        Self {
            key,
            args: Vec::new(),
        }
    }

    pub fn arg(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.args.push((name, value.into()));
        self
    }

    pub fn render(&self, lang: Lang) -> String {
        let args: Vec<(&str, String)> = self.args.iter().map(|(k, v)| (*k, v.clone())).collect();
        tr(lang, self.key, &args)
    }
}

/// A text that is either a catalog message or a sentence written by someone else (an operator,
/// or code that has no key for it yet), shown as written in every language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Msg(Msg),
    Raw(String),
}

impl Text {
    pub fn render(&self, lang: Lang) -> String {
        match self {
            Self::Msg(m) => m.render(lang),
            Self::Raw(s) => s.clone(),
        }
    }
}

/// English, for the API and logs.
impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(Lang::En))
    }
}

impl From<Msg> for Text {
    fn from(m: Msg) -> Self {
        Self::Msg(m)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Self::Raw(s.to_owned())
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Self::Raw(s)
    }
}

const MONTHS_EN: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A Unix time as a reader of `lang` writes a date and time (in UTC: the server does not know
/// the reader's time zone, and says so).
pub fn format_time(lang: Lang, unix: i64) -> String {
    let Ok(t) = OffsetDateTime::from_unix_timestamp(unix) else {
        return String::new();
    };
    let (h, m) = (t.hour(), t.minute());
    match lang {
        Lang::En => format!(
            "{} {} {}, {h:02}:{m:02} UTC",
            t.day(),
            MONTHS_EN[usize::from(u8::from(t.month())) - 1],
            t.year()
        ),
        Lang::ZhCn => format!(
            "{}年{}月{}日 {h:02}:{m:02}（UTC）",
            t.year(),
            u8::from(t.month()),
            t.day()
        ),
    }
}

/// An operator's text, one for every language (`message = "..."`) or per language
/// (`message = { en = "...", zh-CN = "..." }`). A language the table lacks gets its `en` entry;
/// a table without either gives nothing (the built-in text is used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalizedText {
    Any(String),
    PerLang(Vec<(Lang, String)>),
}

impl LocalizedText {
    pub fn get(&self, lang: Lang) -> Option<&str> {
        match self {
            Self::Any(s) => Some(s),
            Self::PerLang(items) => {
                let pick = |l: Lang| items.iter().find(|(x, _)| *x == l).map(|(_, s)| s.as_str());
                pick(lang).or_else(|| pick(Lang::En))
            }
        }
    }
}

impl<'de> Deserialize<'de> for LocalizedText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = LocalizedText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, or a table of language tag to string (e.g. { en = \"...\", zh-CN = \"...\" })")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LocalizedText, E> {
                Ok(LocalizedText::Any(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<LocalizedText, A::Error> {
                let mut items: Vec<(Lang, String)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    let lang = Lang::from_tag(&k).ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "unknown language {k:?}; known: {}",
                            Lang::ALL.map(Lang::tag).join(", ")
                        ))
                    })?;
                    if items.iter().any(|(l, _)| *l == lang) {
                        return Err(serde::de::Error::custom(format!(
                            "language {k:?} is given twice"
                        )));
                    }
                    items.push((lang, v));
                }
                if items.is_empty() {
                    return Err(serde::de::Error::custom("must name at least one language"));
                }
                Ok(LocalizedText::PerLang(items))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_the_best_served_language() {
        let cases = [
            ("zh-CN,zh;q=0.9,en;q=0.8", Some(Lang::ZhCn)),
            ("en-US,en;q=0.9", Some(Lang::En)),
            ("fr-FR, zh;q=0.5, en;q=0.4", Some(Lang::ZhCn)),
            ("fr-FR, en;q=0.5, zh;q=0.5", Some(Lang::En)),
            ("zh-TW,en;q=0.5", Some(Lang::En)),
            ("zh-Hant-HK", None),
            ("zh-Hans-HK", Some(Lang::ZhCn)),
            ("de, fr", None),
            ("zh;q=0, en", Some(Lang::En)),
            ("*", None),
            ("", None),
            ("en;q=abc, zh", Some(Lang::ZhCn)),
        ];
        for (h, want) in cases {
            assert_eq!(Lang::from_accept_language(h), want, "{h}");
        }
    }

    #[test]
    fn catalogs_parse_and_hold_the_same_keys() {
        for l in Lang::ALL {
            assert!(parse_errors(l).is_empty(), "{l}: {:?}", parse_errors(l));
        }
        assert_eq!(keys(Lang::En), keys(Lang::ZhCn));
        assert!(keys(Lang::En).len() > 50);
    }

    #[test]
    fn messages_take_arguments_in_both_languages() {
        let m = Msg::new("done-title").arg("provider", "Acme");
        assert_eq!(m.render(Lang::En), "Acme is connected");
        assert!(m.render(Lang::ZhCn).contains("Acme"));
        assert_ne!(m.render(Lang::ZhCn), m.render(Lang::En));
    }

    #[test]
    fn counts_take_their_plural_form_and_other_digits_stay_text() {
        let wait = |n: &str| Msg::new("error-rate-limited-lead").arg("seconds", n);
        assert_eq!(
            wait("1").render(Lang::En),
            "Too many requests. Try again in 1 second."
        );
        assert_eq!(
            wait("30").render(Lang::En),
            "Too many requests. Try again in 30 seconds."
        );
        assert!(wait("1").render(Lang::ZhCn).contains('1'));
        // A long run of digits (an id, say) prints exactly as given.
        let id = "12345678901234567890";
        assert_eq!(fluent_value(id), FluentValue::from(id));
        assert_eq!(fluent_value("007"), FluentValue::from("007"));
        assert_eq!(fluent_value("7"), FluentValue::from(7u64));
    }

    #[test]
    fn dates_read_as_each_language_writes_them() {
        assert_eq!(
            format_time(Lang::En, 1_796_300_000),
            "3 December 2026, 12:13 UTC"
        );
        assert_eq!(
            format_time(Lang::ZhCn, 1_796_300_000),
            "2026年12月3日 12:13（UTC）"
        );
    }

    #[test]
    fn localized_text_falls_back_to_english_then_nothing() {
        let t: LocalizedText = toml::from_str::<toml::Table>("m = { en = \"hi\" }").unwrap()["m"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(t.get(Lang::ZhCn), Some("hi"));
        let bad = toml::from_str::<toml::Table>("m = { fr = \"salut\" }").unwrap()["m"]
            .clone()
            .try_into::<LocalizedText>()
            .unwrap_err()
            .to_string();
        assert!(bad.contains("unknown language \"fr\""), "{bad}");
    }
}
