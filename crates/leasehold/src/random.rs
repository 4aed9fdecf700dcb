//! Random ids from the operating system: lock tokens, owner ids, a
//! client's id.

use crate::error::{Error, ErrorKind, Result};

/// A fresh 128-bit token from the operating system, as 32 hex digits.
pub(crate) fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("the operating system gave no randomness for a lock token: {e}"),
        )
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(HEX[usize::from(b >> 4)]));
        token.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(token)
}
