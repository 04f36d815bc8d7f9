//! A cookie-keeping HTTP client that follows redirects and submits forms like a browser, and the
//! connect flow walked with it: sign in at the identity issuer, Continue, sign in and Allow at the
//! provider.

use std::sync::Arc;

use reqwest::StatusCode;

/// A page as the browser got it.
pub struct Page {
    pub status: StatusCode,
    pub url: String,
    pub body: String,
}

impl Page {
    /// The first form `selector` matches: its action (absolute) and its inputs' names and values.
    pub fn form(&self, selector: &str) -> (String, Vec<(String, String)>) {
        let doc = scraper::Html::parse_document(&self.body);
        let sel = scraper::Selector::parse(selector).unwrap();
        let form = doc
            .select(&sel)
            .next()
            .unwrap_or_else(|| panic!("no {selector} in {} {}", self.url, self.body));
        let action = form.value().attr("action").unwrap_or("");
        let action = reqwest::Url::parse(&self.url)
            .unwrap()
            .join(action)
            .unwrap()
            .to_string();
        let inputs = scraper::Selector::parse("input").unwrap();
        let fields = form
            .select(&inputs)
            .filter_map(|i| {
                Some((
                    i.value().attr("name")?.to_owned(),
                    i.value().attr("value").unwrap_or("").to_owned(),
                ))
            })
            .collect();
        (action, fields)
    }

    pub fn has(&self, text: &str) -> bool {
        self.body.contains(text)
    }
}

/// A cookie-keeping HTTP client that follows redirects like a browser (never through a proxy).
pub struct Browser {
    pub client: reqwest::Client,
    pub jar: Arc<reqwest::cookie::Jar>,
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    pub fn new() -> Self {
        Self::with_redirects(reqwest::redirect::Policy::limited(20))
    }

    /// Follows redirects except the one back to a provider callback, so a test can hold the
    /// callback URL (code and state) and present it as it likes.
    pub fn stopping_at_callback() -> Self {
        Self::with_redirects(reqwest::redirect::Policy::custom(|a| {
            if a.url().path().starts_with("/oauth/") || a.previous().len() > 20 {
                a.stop()
            } else {
                a.follow()
            }
        }))
    }

    fn with_redirects(policy: reqwest::redirect::Policy) -> Self {
        let jar = Arc::new(reqwest::cookie::Jar::default());
        let client = reqwest::Client::builder()
            .no_proxy()
            .cookie_provider(jar.clone())
            .redirect(policy)
            .build()
            .unwrap();
        Self { client, jar }
    }

    /// The cookies this browser would send to `url`.
    pub fn cookies(&self, url: &str) -> String {
        use reqwest::cookie::CookieStore;
        self.jar
            .cookies(&reqwest::Url::parse(url).unwrap())
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    pub async fn get(&self, url: &str) -> Page {
        let r = self.client.get(url).send().await.unwrap();
        self.settle(r).await
    }

    /// Submits the form `selector` of `page` with its fields, `overrides` replacing or adding.
    pub async fn submit(&self, page: &Page, selector: &str, overrides: &[(&str, &str)]) -> Page {
        let (action, mut fields) = page.form(selector);
        for (k, v) in overrides {
            fields.retain(|(fk, _)| fk != k);
            fields.push((k.to_string(), v.to_string()));
        }
        let r = self
            .client
            .post(&action)
            .form(&fields)
            .send()
            .await
            .unwrap();
        self.settle(r).await
    }

    /// Reads the page, and does what a browser's JavaScript would do with the issuer's
    /// self-submitting forms (e.g. its end-session confirmation).
    async fn settle(&self, mut r: reqwest::Response) -> Page {
        for _ in 0..5 {
            let page = Page {
                status: r.status(),
                url: r.url().to_string(),
                body: r.text().await.unwrap(),
            };
            if !page.body.contains("document.forms[0].submit()") {
                return page;
            }
            let (action, fields) = page.form("form");
            r = self
                .client
                .post(&action)
                .form(&fields)
                .send()
                .await
                .unwrap();
        }
        panic!("too many self-submitting pages");
    }

    /// Opens a connect URL, signs in at the identity issuer as `user`, returns where it lands.
    pub async fn sign_in_to_consent(&self, connect_url: &str, user: &str) -> Page {
        let login = self.get(connect_url).await;
        if login.url.starts_with(connect_url) {
            return login; // already signed in
        }
        assert!(
            login.has("name=\"login\""),
            "expected the identity login page, got {} {}",
            login.url,
            login.body
        );
        self.submit(&login, "form", &[("login", user)]).await
    }

    /// On the consent page: Continue, then sign in and Allow at the provider. Returns the page
    /// mcp-connect shows at the end.
    pub async fn consent_and_allow(&self, consent: &Page, user: &str) -> Page {
        assert!(
            consent.has("Continue"),
            "not a consent page: {} {}",
            consent.url,
            consent.body
        );
        let upstream_login = self
            .submit(consent, "form.actions", &[("action", "continue")])
            .await;
        let upstream_consent = if upstream_login.has("name=\"login\"") {
            self.submit(&upstream_login, "form", &[("login", user)])
                .await
        } else {
            upstream_login
        };
        assert!(
            upstream_consent.has("Allow"),
            "expected the provider consent page: {} {}",
            upstream_consent.url,
            upstream_consent.body
        );
        self.submit(&upstream_consent, "form", &[("decision", "allow")])
            .await
    }

    /// In a `stopping_at_callback` browser: the flow from a connect URL up to the provider's
    /// Allow (only `decision=allow` posted); asserts that the provider redirects and returns where
    /// to, mcp-connect's callback URL (with code and state), not yet followed.
    pub async fn provider_callback_url(&self, connect_url: &str, user: &str) -> String {
        let consent = self.sign_in_to_consent(connect_url, user).await;
        let login = self
            .submit(&consent, "form.actions", &[("action", "continue")])
            .await;
        let upstream_consent = self.submit(&login, "form", &[("login", user)]).await;
        let (action, _) = upstream_consent.form("form");
        let r = self
            .client
            .post(&action)
            .form(&[("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_redirection(),
            "expected a redirect to the callback, got {}",
            r.status()
        );
        r.headers()[reqwest::header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// The whole flow for `user` from a connect URL; asserts that it ends well (200) and returns
    /// mcp-connect's last page.
    pub async fn connect(&self, connect_url: &str, user: &str) -> Page {
        let consent = self.sign_in_to_consent(connect_url, user).await;
        let done = self.consent_and_allow(&consent, user).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        done
    }
}
