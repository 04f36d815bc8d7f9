//! Stored grants: handing out fresh tokens (refresh with one redemption at a time, the sealed
//! token cache), revocation, which apps may use a grant, refresh ahead of expiry, and re-sealing
//! everything under a new key.

pub mod access;
pub mod cache;
pub mod refresh_ahead;
pub mod rotation;
pub mod tokens;
