//! How stored secrets are kept: a password only as a salted hash ([`SaltedHash`], a
//! random salt per password, compared in constant time), and digests that leave the
//! process (annotations, labels) only keyed ([`hmac_sha256`]) so that nobody who can read
//! them can test password guesses against them.
//!
//! API keys and bearer tokens are random, high-entropy secrets: their plain SHA-256 is
//! kept (`config::SecretHash`); a password may be guessable, so it never is.

use std::fmt;

use rand::RngCore as _;
use sha2::{Digest, Sha256};

/// Bytes of a generated salt.
pub const SALT_BYTES: usize = 16;
/// Longest salt accepted in a written hash.
pub const MAX_SALT_BYTES: usize = 64;

/// A password as `SHA-256(salt || password)` with its salt. Written as
/// `sha256:<salt hex>:<digest hex>` (what `proxy-pool-controller hash-password` prints).
#[derive(Clone, PartialEq, Eq)]
pub struct SaltedHash {
    salt: Vec<u8>,
    digest: [u8; 32],
}

impl fmt::Debug for SaltedHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SaltedHash(***)")
    }
}

impl SaltedHash {
    /// Hashes `password` with a fresh random salt.
    pub fn new(password: &[u8]) -> Self {
        let mut salt = vec![0u8; SALT_BYTES];
        rand::rng().fill_bytes(&mut salt);
        Self::with_salt(salt, password)
    }

    /// Hashes `password` with `salt`.
    pub fn with_salt(salt: Vec<u8>, password: &[u8]) -> Self {
        let digest = digest(&salt, password);
        Self { salt, digest }
    }

    /// Parses `sha256:<salt hex>:<digest hex>` (lower-case hex, salt 8 to 64 bytes).
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        const SHAPE: &str = "must be `sha256:<salt hex>:<SHA-256(salt || password) hex>` \
             with a salt of 8 to 64 bytes, lower-case hex";
        let rest = text.strip_prefix("sha256:").ok_or(SHAPE)?;
        let (salt, digest_hex) = rest.split_once(':').ok_or(SHAPE)?;
        let lower_hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !lower_hex(salt) || !lower_hex(digest_hex) || digest_hex.len() != 64 {
            return Err(SHAPE);
        }
        let salt = hex::decode(salt).map_err(|_| SHAPE)?;
        if salt.len() < 8 || salt.len() > MAX_SALT_BYTES {
            return Err(SHAPE);
        }
        let mut digest = [0u8; 32];
        hex::decode_to_slice(digest_hex, &mut digest).map_err(|_| SHAPE)?;
        Ok(Self { salt, digest })
    }

    /// The written form.
    pub fn to_text(&self) -> String {
        format!(
            "sha256:{}:{}",
            hex::encode(&self.salt),
            hex::encode(self.digest)
        )
    }

    /// Whether `presented` is the password (constant time in the digest).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let got = digest(&self.salt, presented);
        // Constant time: every byte is compared.
        got.iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Spends the same work as [`SaltedHash::matches`] for an unknown user, so the
    /// answer time does not tell known user names apart.
    pub fn burn(presented: &[u8]) {
        let _ = std::hint::black_box(digest(&[0u8; SALT_BYTES], presented));
    }
}

fn digest(salt: &[u8], password: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password);
    h.finalize().into()
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salted_hashes_round_trip_and_differ_per_salt() {
        let a = SaltedHash::new(b"hunter2");
        let b = SaltedHash::new(b"hunter2");
        assert!(a.matches(b"hunter2") && b.matches(b"hunter2"));
        assert!(!a.matches(b"hunter3"));
        assert_ne!(a.to_text(), b.to_text(), "a fresh salt each time");
        let parsed = SaltedHash::parse(&a.to_text()).expect("round trip");
        assert_eq!(parsed, a);
        assert!(!format!("{a:?}").contains(&hex::encode(a.digest)));
        let known = SaltedHash::with_salt(b"saltsalt".to_vec(), b"pw");
        let written = format!(
            "sha256:{}:{}",
            hex::encode(b"saltsalt"),
            hex::encode(Sha256::digest(b"saltsaltpw"))
        );
        assert_eq!(SaltedHash::parse(&written), Ok(known));
        for bad in [
            "",
            "sha256:",
            "md5:00:00",
            "sha256:0011:aa",
            "sha256:XX00112233445566:0000000000000000000000000000000000000000000000000000000000000000",
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        ] {
            assert!(SaltedHash::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let long_key = [0xaa_u8; 131];
        let mac = hmac_sha256(
            &long_key,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
