//! Users, API keys and project roles. A key is `tl_<id>_<secret>`: the id (12 hex digits) names
//! the key in lists and revocations, the secret carries 256 random bits; only the SHA-256 of the
//! whole key is stored, so the database never holds a usable key.

use crate::db::{vals, Db, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use ring::digest::{digest, SHA256};
use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

/// Who a verified key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user_id: i64,
    pub name: String,
    pub is_admin: bool,
    pub key_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: i64,
    pub name: String,
    pub is_admin: bool,
    pub created_ms: i64,
    /// Keys not revoked.
    pub active_keys: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub id: String,
    pub user: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
}

/// A key as made: the whole key, shown once, and its id.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub id: String,
    pub key: String,
}

const KEY_PREFIX: &str = "tl_";
const KEY_ID_BYTES: usize = 6;
const KEY_SECRET_BYTES: usize = 32;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(n: usize) -> Result<String> {
    let mut bytes = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Corrupt("the system's random number generator failed".into()))?;
    Ok(hex(&bytes))
}

fn key_hash(key: &str) -> Vec<u8> {
    digest(&SHA256, key.as_bytes()).as_ref().to_vec()
}

/// The id inside a key's text, if the text has a key's shape.
pub fn key_id_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_len = |s: &str, n: usize| s.len() == 2 * n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_len(id, KEY_ID_BYTES) && hex_len(secret, KEY_SECRET_BYTES)).then_some(id)
}

/// A user name: 1 to 64 characters from [A-Za-z0-9_.@-].
pub fn check_user_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            field: "name".into(),
            reason: "a user name has 1 to 64 characters from [A-Za-z0-9_.@-]".into(),
        })
    }
}

/// A fresh key and the digest that is stored of it.
fn new_key() -> Result<(NewKey, Vec<u8>)> {
    let id = random_hex(KEY_ID_BYTES)?;
    let key = format!("{KEY_PREFIX}{id}_{}", random_hex(KEY_SECRET_BYTES)?);
    let hash = key_hash(&key);
    Ok((NewKey { id, key }, hash))
}

fn insert_key(db: &dyn Db, key_id: &str, user_id: i64, hash: &[u8]) -> Result<()> {
    db.exec(
        "INSERT INTO api_keys (id, user_id, sha256, created_ms) VALUES (?1, ?2, ?3, ?4)",
        vals![key_id, user_id, hash, now_ms()],
    )?;
    Ok(())
}

pub(crate) fn bump_generation(db: &dyn Db) -> Result<()> {
    db.exec("UPDATE auth_state SET generation = generation + 1 WHERE id = 1", vals![])?;
    Ok(())
}

fn user_row(r: &Row) -> Result<UserRow> {
    Ok(UserRow { id: r.get(0)?, name: r.get(1)?, is_admin: r.get(2)?, created_ms: r.get(3)?, active_keys: r.get(4)? })
}

fn key_row(r: &Row) -> Result<KeyRow> {
    Ok(KeyRow { id: r.get(0)?, user: r.get(1)?, created_ms: r.get(2)?, last_used_ms: r.get(3)?, revoked_ms: r.get(4)? })
}

impl MetaStore {
    /// Creates a user; answers its first key.
    pub fn add_user(&self, name: &str, is_admin: bool) -> Result<NewKey> {
        check_user_name(name)?;
        let (key, hash) = new_key()?;
        self.write(|tx| {
            if tx.exists("SELECT id FROM users WHERE name = ?1", vals![name])? {
                return Err(Error::Conflict { field: "name".into(), reason: format!("user {name:?} exists") });
            }
            let user_id: i64 = tx
                .row(
                    "INSERT INTO users (name, is_admin, created_ms) VALUES (?1, ?2, ?3) RETURNING id",
                    vals![name, is_admin, now_ms()],
                )?
                .ok_or_else(|| Error::Corrupt("an insert returned no id".into()))?
                .get(0)?;
            insert_key(tx, &key.id, user_id, &hash)
        })?;
        Ok(key)
    }

    /// Makes another key for a user.
    pub fn create_key(&self, user: &str) -> Result<NewKey> {
        let (key, hash) = new_key()?;
        self.write(|tx| {
            let user_id: i64 = tx
                .row("SELECT id FROM users WHERE name = ?1", vals![user])?
                .ok_or_else(|| not_found(format!("user {user:?}")))?
                .get(0)?;
            insert_key(tx, &key.id, user_id, &hash)
        })?;
        Ok(key)
    }

    /// Revokes a key by its id; it stops working at once.
    pub fn revoke_key(&self, key_id: &str) -> Result<()> {
        self.write(|tx| {
            let changed = tx.exec(
                "UPDATE api_keys SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
                vals![key_id, now_ms()],
            )?;
            if changed == 0 && !tx.exists("SELECT 1 FROM api_keys WHERE id = ?1", vals![key_id])? {
                return Err(not_found(format!("key {key_id:?}")));
            }
            bump_generation(tx)
        })
    }

    /// Removes a user and their keys; what they logged stays.
    pub fn remove_user(&self, name: &str) -> Result<()> {
        self.write(|tx| {
            let counts = tx
                .row(
                    "SELECT (SELECT is_admin FROM users WHERE name = ?1), (SELECT count(*) FROM users WHERE is_admin = 1)",
                    vals![name],
                )?
                .ok_or_else(|| Error::Corrupt("a count answered no row".into()))?;
            let (is_admin, admins): (Option<bool>, i64) = (counts.get(0)?, counts.get(1)?);
            if is_admin == Some(true) && admins == 1 {
                return Err(Error::Conflict {
                    field: "name".into(),
                    reason: format!("{name:?} is the last admin; make another admin first"),
                });
            }
            if tx.exec("DELETE FROM users WHERE name = ?1", vals![name])? == 0 {
                return Err(not_found(format!("user {name:?}")));
            }
            bump_generation(tx)
        })
    }

    pub fn users(&self) -> Result<Vec<UserRow>> {
        self.read(|db| {
            db.rows(
                "SELECT u.id, u.name, u.is_admin, u.created_ms,
                        (SELECT count(*) FROM api_keys k WHERE k.user_id = u.id AND k.revoked_ms IS NULL)
                 FROM users u ORDER BY u.name",
                vals![],
            )?
            .iter()
            .map(user_row)
            .collect()
        })
    }

    pub fn keys(&self, user: Option<&str>) -> Result<Vec<KeyRow>> {
        self.read(|db| {
            db.rows(
                "SELECT k.id, u.name, k.created_ms, k.last_used_ms, k.revoked_ms FROM api_keys k
                 JOIN users u ON u.id = k.user_id WHERE CAST(?1 AS TEXT) IS NULL OR u.name = ?1 ORDER BY u.name, k.created_ms",
                vals![user],
            )?
            .iter()
            .map(key_row)
            .collect()
        })
    }

    /// Whether any user exists.
    pub fn has_users(&self) -> Result<bool> {
        self.read(|db| db.exists("SELECT 1 FROM users LIMIT 1", vals![]))
    }

    /// The owner of a key that is well formed, known and not revoked.
    pub fn verify_key(&self, key: &str) -> Result<Option<Caller>> {
        let Some(key_id) = key_id_of(key) else { return Ok(None) };
        let hash = key_hash(key);
        let found = self.read(|db| {
            db.row(
                "SELECT k.sha256, u.id, u.name, u.is_admin FROM api_keys k JOIN users u ON u.id = k.user_id
                 WHERE k.id = ?1 AND k.revoked_ms IS NULL",
                vals![key_id],
            )
        })?;
        let Some(r) = found else { return Ok(None) };
        let stored: Vec<u8> = r.get(0)?;
        if !bool::from(stored.ct_eq(&hash)) {
            return Ok(None);
        }
        Ok(Some(Caller { user_id: r.get(1)?, name: r.get(2)?, is_admin: r.get(3)?, key_id: key_id.to_owned() }))
    }

    /// Records when keys were last used.
    pub fn touch_keys(&self, used: &[(String, i64)]) -> Result<()> {
        if used.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            for (id, at) in used {
                tx.exec(
                    "UPDATE api_keys SET last_used_ms = ?2 WHERE id = ?1 AND (last_used_ms IS NULL OR last_used_ms < ?2)",
                    vals![id, *at],
                )?;
            }
            Ok(())
        })
    }

    /// Counts changes that took access away; a server that sees it move forgets cached keys.
    pub fn auth_generation(&self) -> Result<i64> {
        self.read(|db| {
            db.row("SELECT generation FROM auth_state WHERE id = 1", vals![])?
                .ok_or_else(|| Error::Corrupt("auth_state has no row".into()))?
                .get(0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_works_until_revoked_and_is_stored_only_as_a_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        assert!(!m.has_users().unwrap());
        let first = m.add_user("ada", true).unwrap();
        assert_eq!(key_id_of(&first.key), Some(first.id.as_str()));
        let caller = m.verify_key(&first.key).unwrap().expect("a fresh key verifies");
        assert_eq!((caller.name.as_str(), caller.is_admin), ("ada", true));
        let second = m.create_key("ada").unwrap();
        assert!(m.verify_key(&second.key).unwrap().is_some());
        // A key with a known id and a wrong secret is refused.
        let forged = format!("{}{}", &first.key[..first.key.len() - 4], "0000");
        assert!(m.verify_key(&forged).unwrap().is_none() || forged == first.key);
        assert!(m.verify_key("tl_nonsense").unwrap().is_none());
        let before = m.auth_generation().unwrap();
        m.revoke_key(&first.id).unwrap();
        assert!(m.auth_generation().unwrap() > before);
        assert!(m.verify_key(&first.key).unwrap().is_none());
        assert!(m.verify_key(&second.key).unwrap().is_some());
        assert!(matches!(m.add_user("ada", false), Err(Error::Conflict { .. })));
        assert!(matches!(m.add_user("a b", false), Err(Error::Invalid { .. })));
        drop(m);
        for file in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(file.unwrap().path()).unwrap();
            for key in [&first.key, &second.key] {
                let secret = key.rsplit('_').next().unwrap();
                assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "a secret is in the database");
            }
        }
    }

    #[test]
    fn removing_a_user_ends_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let m = crate::test_store(dir.path());
        let key = m.add_user("bo", false).unwrap();
        m.remove_user("bo").unwrap();
        assert!(m.verify_key(&key.key).unwrap().is_none());
        assert!(matches!(m.remove_user("bo"), Err(Error::NotFound { .. })));
    }
}
