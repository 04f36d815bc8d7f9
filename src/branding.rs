//! `[branding]`: the operator's product name, logo, accent colour and support link on every user
//! page. Validated at start-up like every other key; what a page may load (a logo from another
//! origin) is added to the Content-Security-Policy here, and nowhere else.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use url::Url;

/// The name shown when the operator sets none.
pub const DEFAULT_PRODUCT_NAME: &str = "mcp-connect";
/// The largest logo file served from memory.
const MAX_LOGO_BYTES: usize = 512 * 1024;

/// `[branding]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBranding {
    product_name: Option<String>,
    /// An https URL (or http on loopback) of an image; its origin is allowed in the CSP.
    logo_url: Option<String>,
    /// A PNG, JPEG, GIF, WebP or SVG file, read at start-up and served at `/static/logo`.
    logo_path: Option<String>,
    /// `#rrggbb`.
    accent_color: Option<String>,
    /// An https URL (or http on loopback) or a `mailto:` address.
    support_url: Option<String>,
}

/// The operator's logo: a URL on another origin, or a file served by us.
#[derive(Clone)]
pub enum Logo {
    Url(Url),
    File {
        bytes: Arc<Vec<u8>>,
        content_type: &'static str,
    },
}

impl std::fmt::Debug for Logo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(u) => f.debug_tuple("Url").field(&u.as_str()).finish(),
            Self::File {
                bytes,
                content_type,
            } => f
                .debug_struct("File")
                .field("bytes", &bytes.len())
                .field("content_type", content_type)
                .finish(),
        }
    }
}

/// The validated `[branding]`.
#[derive(Debug, Clone)]
pub struct Branding {
    pub product_name: String,
    pub logo: Option<Logo>,
    /// `#rrggbb`, lower case.
    pub accent_color: Option<String>,
    pub support_url: Option<Url>,
}

impl Default for Branding {
    fn default() -> Self {
        Self {
            product_name: DEFAULT_PRODUCT_NAME.into(),
            logo: None,
            accent_color: None,
            support_url: None,
        }
    }
}

/// Lengths and characters a name shown in a page header may have.
fn check_name(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("must not be empty".into());
    }
    if t.chars().count() > 60 {
        return Err("must be at most 60 characters".into());
    }
    if t.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(t.to_owned())
}

/// `#rrggbb` (or `#rgb`), returned as lower-case `#rrggbb`.
pub fn parse_color(s: &str) -> Result<String, String> {
    let hex = s
        .strip_prefix('#')
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("must be a colour like \"#0b5fff\", not {s:?}"))?;
    let full = match hex.len() {
        6 => hex.to_ascii_lowercase(),
        3 => hex
            .chars()
            .flat_map(|c| [c, c])
            .collect::<String>()
            .to_ascii_lowercase(),
        _ => return Err(format!("must be a colour like \"#0b5fff\", not {s:?}")),
    };
    Ok(format!("#{full}"))
}

fn web_url(s: &str, allow_mailto: bool) -> Result<Url, String> {
    let u = Url::parse(s).map_err(|e| format!("is not a URL: {e}"))?;
    match u.scheme() {
        "mailto" if allow_mailto => Ok(u),
        "https" => Ok(u),
        "http"
            if u.host_str()
                .is_some_and(|h| h == "localhost" || h == "127.0.0.1" || h == "[::1]") =>
        {
            Ok(u)
        }
        other => Err(format!(
            "must be an https URL{}, not {other:?}",
            if allow_mailto { " or mailto:" } else { "" }
        )),
    }
}

fn logo_type(path: &Path) -> Result<&'static str, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    Ok(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        other => {
            return Err(format!(
                "must be a .png, .jpg, .gif, .webp or .svg file, not {other:?}"
            ));
        }
    })
}

/// Checks `[branding]`, reporting each bad key through `err` (named under `branding.`).
pub fn validate(raw: RawBranding, err: &mut impl FnMut(&str, String)) -> Branding {
    let mut b = Branding::default();
    if let Some(n) = raw.product_name.as_deref() {
        match check_name(n) {
            Ok(n) => b.product_name = n,
            Err(m) => err("branding.product_name", m),
        }
    }
    match (raw.logo_url.as_deref(), raw.logo_path.as_deref()) {
        (Some(_), Some(_)) => err(
            "branding",
            "give either `logo_url` or `logo_path`, not both".into(),
        ),
        (Some(u), None) => match web_url(u, false) {
            Ok(u) => b.logo = Some(Logo::Url(u)),
            Err(m) => err("branding.logo_url", m),
        },
        (None, Some(p)) => {
            let path = Path::new(p);
            match logo_type(path) {
                Err(m) => err("branding.logo_path", m),
                Ok(content_type) => match std::fs::read(path) {
                    Err(e) => err("branding.logo_path", format!("cannot read {p}: {e}")),
                    Ok(bytes) if bytes.len() > MAX_LOGO_BYTES => err(
                        "branding.logo_path",
                        format!("is {} bytes; at most {MAX_LOGO_BYTES}", bytes.len()),
                    ),
                    Ok(bytes) if bytes.is_empty() => {
                        err("branding.logo_path", format!("{p} is empty"))
                    }
                    Ok(bytes) => {
                        b.logo = Some(Logo::File {
                            bytes: Arc::new(bytes),
                            content_type,
                        })
                    }
                },
            }
        }
        (None, None) => {}
    }
    if let Some(c) = raw.accent_color.as_deref() {
        match parse_color(c) {
            Ok(c) => b.accent_color = Some(c),
            Err(m) => err("branding.accent_color", m),
        }
    }
    if let Some(u) = raw.support_url.as_deref() {
        match web_url(u, true) {
            Ok(u) => b.support_url = Some(u),
            Err(m) => err("branding.support_url", m),
        }
    }
    b
}

/// Relative luminance (WCAG 2.x) of `#rrggbb`.
fn luminance(hex: &str) -> f64 {
    let c = |i: usize| {
        let v = f64::from(u8::from_str_radix(hex.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0))
            / 255.0;
        if v <= 0.03928 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * c(1) + 0.7152 * c(3) + 0.0722 * c(5)
}

fn contrast(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    (hi + 0.05) / (lo + 0.05)
}

impl Branding {
    /// Where a page's `<img>` loads the logo from.
    pub fn logo_src(&self) -> Option<String> {
        match &self.logo {
            Some(Logo::Url(u)) => Some(u.to_string()),
            Some(Logo::File { .. }) => Some("/static/logo".into()),
            None => None,
        }
    }

    pub fn support_href(&self) -> Option<&str> {
        self.support_url.as_ref().map(Url::as_str)
    }

    /// The stylesheet that applies the accent colour (`/static/brand.css`): the text on the
    /// accent is black or white, whichever reads better, so any colour keeps buttons legible.
    pub fn stylesheet(&self) -> Option<String> {
        let accent = self.accent_color.as_deref()?;
        let l = luminance(accent);
        let on = if contrast(l, 1.0) >= contrast(l, 0.0) {
            "#ffffff"
        } else {
            "#000000"
        };
        Some(format!(
            ":root {{ --accent: {accent}; --on-accent: {on}; }}\n"
        ))
    }

    /// The Content-Security-Policy of every response: our own origin only, plus the logo's
    /// origin when it is elsewhere.
    pub fn content_security_policy(&self) -> String {
        let img = match &self.logo {
            Some(Logo::Url(u)) => format!("'self' {}", u.origin().ascii_serialization()),
            _ => "'self'".into(),
        };
        // No form-action: Chrome applies it to the redirect that follows a form post, and the
        // consent form's answer is a redirect to the provider.
        format!(
            "default-src 'none'; style-src 'self'; img-src {img}; frame-ancestors 'none'; base-uri 'none'"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_text: &str) -> (Branding, Vec<(String, String)>) {
        let raw: RawBranding = toml::from_str(toml_text).unwrap();
        let mut errors = Vec::new();
        let b = validate(raw, &mut |k: &str, m: String| {
            errors.push((k.to_owned(), m))
        });
        (b, errors)
    }

    #[test]
    fn colours_are_validated_and_normalised() {
        assert_eq!(parse_color("#0B5FFF").unwrap(), "#0b5fff");
        assert_eq!(parse_color("#abc").unwrap(), "#aabbcc");
        for bad in ["0b5fff", "#0b5ff", "#ggg000", "red", "#0b5fff; x", ""] {
            assert!(parse_color(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_on_the_accent_is_whichever_reads_better() {
        let dark = Branding {
            accent_color: Some("#0b5fff".into()),
            ..Default::default()
        };
        assert!(dark.stylesheet().unwrap().contains("--on-accent: #ffffff"));
        let light = Branding {
            accent_color: Some("#ffd400".into()),
            ..Default::default()
        };
        assert!(light.stylesheet().unwrap().contains("--on-accent: #000000"));
    }

    #[test]
    fn bad_keys_are_named() {
        let (_, errors) = check(
            "product_name = \"\"\naccent_color = \"blue\"\nlogo_url = \"http://cdn.example/x.png\"\nsupport_url = \"javascript:alert(1)\"",
        );
        let keys: Vec<&str> = errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "branding.product_name",
                "branding.logo_url",
                "branding.accent_color",
                "branding.support_url"
            ]
        );
        let (_, errors) = check("logo_path = \"/etc/passwd\"");
        assert!(errors[0].1.contains(".png"), "{errors:?}");
    }

    #[test]
    fn a_logo_elsewhere_is_allowed_by_the_csp_and_nothing_else_is() {
        let (b, errors) = check("logo_url = \"https://cdn.example.com/brand/logo.svg\"");
        assert!(errors.is_empty());
        assert_eq!(
            b.content_security_policy(),
            "default-src 'none'; style-src 'self'; img-src 'self' https://cdn.example.com; frame-ancestors 'none'; base-uri 'none'"
        );
        assert!(
            !Branding::default()
                .content_security_policy()
                .contains("https:")
        );
    }
}
