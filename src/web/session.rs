//! A typed wrapper over the browser session: who is signed in, the CSRF token, and the random
//! binding that ties pending provider redirects (`state`) to this browser. A session (and so a
//! row) exists only once a sign-in succeeded; what a sign-in needs before that lives in the
//! sealed pre-sign-in cookie (`presignin`).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tower_sessions::Session;

use crate::connect::identity::SignedInUser;
use crate::crypto::{ct_eq, random_token, sha256_b64};
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;

const USER: &str = "user";
const CSRF: &str = "csrf";
const BINDING: &str = "binding";

pub struct BrowserSession(Session);

impl<S: Send + Sync> FromRequestParts<S> for BrowserSession {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        Session::from_request_parts(parts, state)
            .await
            .map(BrowserSession)
            .map_err(|_| Error::internal(anyhow::anyhow!("session layer missing")))
    }
}

fn store_err(e: tower_sessions::session::Error) -> Error {
    Error::Unavailable(anyhow::anyhow!("session store: {e}"))
}

impl BrowserSession {
    pub async fn user(&self) -> Result<Option<SignedInUser>> {
        self.0.get(USER).await.map_err(store_err)
    }

    /// The hash of this browser's binding, creating the binding if needed. Only for a signed-in
    /// session: called before sign-in it would create a session row.
    pub async fn binding_hash(&self) -> Result<String> {
        let b: Option<String> = self.0.get(BINDING).await.map_err(store_err)?;
        let b = match b {
            Some(b) => b,
            None => {
                let b = random_token(32);
                self.0.insert(BINDING, &b).await.map_err(store_err)?;
                b
            }
        };
        Ok(sha256_b64(b.as_bytes()))
    }

    /// The binding hash if this browser has one (a callback must not create a session).
    pub async fn existing_binding_hash(&self) -> Result<Option<String>> {
        let b: Option<String> = self.0.get(BINDING).await.map_err(store_err)?;
        Ok(b.map(|b| sha256_b64(b.as_bytes())))
    }

    pub async fn csrf_token(&self) -> Result<String> {
        if let Some(t) = self.0.get::<String>(CSRF).await.map_err(store_err)? {
            return Ok(t);
        }
        let t = random_token(32);
        self.0.insert(CSRF, &t).await.map_err(store_err)?;
        Ok(t)
    }

    /// Refuses a form post whose CSRF token does not match this session's.
    pub async fn check_csrf(&self, presented: &str) -> Result<()> {
        let expected: Option<String> = self.0.get(CSRF).await.map_err(store_err)?;
        match expected {
            Some(t) if ct_eq(t.as_bytes(), presented.as_bytes()) => Ok(()),
            _ => Err(Error::refused(
                Refusal::CsrfFailed,
                Msg::new("form-expired-title"),
                Msg::new("form-expired-lead"),
            )),
        }
    }

    /// Records who signed in. Everything this browser's session held before is dropped, and the
    /// session id, the CSRF token and the binding are all new: a planted or earlier session, its
    /// token and the redirects bound to it are worthless afterwards.
    pub async fn sign_in(&self, user: &SignedInUser) -> Result<()> {
        // A browser that sent a session id (planted, or from an earlier sign-in) gets a new
        // one and the old row is deleted; one that sent none gets a fresh id when the session
        // is first stored, and there is no row to delete.
        let had_id = self.0.id().is_some();
        self.0.clear().await;
        if had_id {
            self.0.cycle_id().await.map_err(store_err)?;
        }
        self.0.insert(USER, user).await.map_err(store_err)?;
        self.0
            .insert(CSRF, random_token(32))
            .await
            .map_err(store_err)?;
        self.0
            .insert(BINDING, random_token(32))
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// Deletes the session (its row and, in the response, its cookie).
    pub async fn sign_out(&self) -> Result<()> {
        self.0.flush().await.map_err(store_err)
    }
}
