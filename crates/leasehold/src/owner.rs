//! Who may take a reentrant lock again while holding it.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest owner id accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// The owner of [`ReentrantMutex`](crate::ReentrantMutex) and
/// [`RwLock`](crate::RwLock) acquisitions: an owner that holds such a lock
/// may take it again (each acquisition is a level, each release undoes one),
/// and only its own acquisitions count as its own.
///
/// By default a handle's owner is the task that acquires through it (each
/// tokio task, or each thread outside a task, is an owner of its own), so
/// tasks that share a handle exclude each other. An `Owner` is for the
/// code that wants one logical owner (a request, a job) to span several
/// tasks: give it to a handle with `with_owner`, and every task that uses
/// the handle acquires as that owner. Clones are the same owner. Make one
/// from an id you keep (a job id, say) with [`Owner::from_id`] so that
/// another process can act as the same owner.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// A fresh owner with a random id.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::System`](crate::ErrorKind::System) when the operating
    /// system gives no randomness.
    pub fn new() -> Result<Owner> {
        Ok(Owner(crate::random::new_token()?.into()))
    }

    /// The owner called `id`: every process that uses the same id is the
    /// same owner, so choose ids that are unique to one logical owner.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// empty id, one over [`MAX_OWNER_LEN`] bytes, or one with whitespace or
    /// control characters.
    pub fn from_id(id: impl Into<String>) -> Result<Owner> {
        let id = id.into();
        if id.is_empty() {
            return Err(Error::invalid("owner id is empty: give the owner a name"));
        }
        if id.len() > MAX_OWNER_LEN {
            return Err(Error::invalid(format!(
                "owner id is {} bytes long: the limit is {MAX_OWNER_LEN} bytes",
                id.len()
            )));
        }
        if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid(format!(
                "owner id {id:?} contains whitespace or control characters: use letters, \
                 digits and punctuation"
            )));
        }
        Ok(Owner(id.into()))
    }

    /// An owner whose id leasehold made itself, and so needs no check.
    pub(crate) fn trusted(id: String) -> Owner {
        Owner(id.into())
    }

    /// The owner's id, as Redis records it.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&self.id()).finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(Owner::from_id("").unwrap_err().is_invalid_input());
        assert!(Owner::from_id("a b").unwrap_err().is_invalid_input());
        assert!(Owner::from_id("a\nb").unwrap_err().is_invalid_input());
        assert!(Owner::from_id("x".repeat(MAX_OWNER_LEN + 1))
            .unwrap_err()
            .is_invalid_input());
        assert_eq!(Owner::from_id("job-42").unwrap().id(), "job-42");
        let a = Owner::new().unwrap();
        assert_ne!(a, Owner::new().unwrap());
        assert_eq!(a.clone(), a);
    }
}
