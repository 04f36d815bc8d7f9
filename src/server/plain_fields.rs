//! Text log fields as tracing-subscriber's `DefaultVisitor` writes them, for output without
//! colours. Every request's span formats its fields when it opens, whether or not anything is
//! logged in it; `DefaultVisitor` styles each field name and `=` even when the style is empty,
//! which costs more than writing them. The text is the same byte for byte; fields with a
//! special rule (`message`, `r#` names, `log.*` metadata, errors) still go to `DefaultVisitor`.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::VisitOutput;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// Writes `name=value` pairs separated by spaces, as `DefaultVisitor` does without colours.
pub struct PlainVisitor<'w> {
    writer: Writer<'w>,
    is_empty: bool,
    result: fmt::Result,
}

impl<'w> PlainVisitor<'w> {
    /// `is_empty`: nothing is written yet (no space before the first field).
    pub fn new(writer: Writer<'w>, is_empty: bool) -> Self {
        Self {
            writer,
            is_empty,
            result: Ok(()),
        }
    }

    /// A field `DefaultVisitor` writes as `name=value:?` with no rule of its own.
    fn is_plain(name: &str) -> bool {
        name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
    }

    fn write_plain(&mut self, name: &str, value: &dyn fmt::Debug) {
        self.write_with(name, |w| write!(w, "{value:?}"));
    }

    /// `name=value` for a string: quoted as `{:?}` quotes it. A string that `{:?}` writes
    /// unchanged between its quotes (printable ASCII without `"` and `\`: request ids, paths,
    /// provider names) is copied as it is, without escaping it character by character.
    fn write_plain_str(&mut self, name: &str, value: &str) {
        let verbatim = value
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\');
        if verbatim {
            self.write_with(name, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else {
            self.write_plain(name, &value);
        }
    }

    fn write_with(&mut self, name: &str, value: impl FnOnce(&mut Writer<'w>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        if self.is_empty {
            self.is_empty = false;
        } else if let Err(e) = self.writer.write_char(' ') {
            self.result = Err(e);
            return;
        }
        self.result = self
            .writer
            .write_str(name)
            .and_then(|()| self.writer.write_char('='))
            .and_then(|()| value(&mut self.writer));
    }

    /// One field through `DefaultVisitor`, continuing this visitor's spacing.
    fn delegate(&mut self, name: &str, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        // It writes every field but the `log.*` metadata it skips.
        if !name.starts_with("log.") {
            self.is_empty = false;
        }
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if Self::is_plain(field.name()) {
            self.write_plain_str(field.name(), value);
        } else {
            self.delegate(field.name(), |v| v.record_str(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field.name(), |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if Self::is_plain(field.name()) {
            self.write_plain(field.name(), value);
        } else {
            self.delegate(field.name(), |v| v.record_debug(field, value));
        }
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::field::RecordFields;

    use super::*;

    /// Formats one span's or event's fields with both visitors.
    fn both(fields: &dyn RecordFields) -> (String, String) {
        let mut plain = String::new();
        let mut p = PlainVisitor::new(Writer::new(&mut plain), true);
        fields.record(&mut p);
        p.finish().unwrap();
        let mut default = String::new();
        let mut d = DefaultVisitor::new(Writer::new(&mut default), true);
        fields.record(&mut d);
        d.finish().unwrap();
        (plain, default)
    }

    #[test]
    fn writes_what_the_default_visitor_writes() {
        use tracing_subscriber::layer::SubscriberExt as _;

        // A layer that formats each new span's and event's fields with both visitors.
        struct Compare(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Compare {
            fn on_new_span(
                &self,
                attrs: &tracing::span::Attributes<'_>,
                _: &tracing::span::Id,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0.lock().unwrap().push(both(attrs));
            }
            fn on_event(
                &self,
                event: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0.lock().unwrap().push(both(event));
            }
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Compare(seen.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let err = std::io::Error::other("disk \"full\"");
            let _span = tracing::info_span!(
                "request",
                method = %"POST",
                path = %"/v1/tokens",
                request_id = "a\"b\\c\u{1b}[31m",
                // Strings copied as they are, and strings on each side of that rule.
                verbatim = "req-01H_x9 /v1/tokens?a=b&c=~!#$%'()*+,-.:;<=>@[]^`{|}",
                tab = "a\tb",
                accented = "caf\u{e9}",
                quote = "\"",
                empty = "",
                status = tracing::field::Empty,
                n = 3_u64,
                r#type = "x",
                ok = true,
            );
            tracing::info!(
                count = -2_i64,
                error = &err as &dyn std::error::Error,
                "done \u{1b}[0m {}",
                1
            );
            tracing::info!(r#loop = 1.5_f64, "second");
        });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        for (plain, default) in seen.iter() {
            assert_eq!(plain, default);
            assert!(!plain.is_empty());
        }
        assert!(
            seen[0]
                .0
                .starts_with("method=POST path=/v1/tokens request_id=")
        );
    }
}
