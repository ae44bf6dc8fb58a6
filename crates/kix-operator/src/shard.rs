//! Which shard of a sharded operator (`--shards N`) a record belongs to:
//! its `kix.run/shard` label, else a hash of its Kix cluster's name, so all
//! records of a Kix cluster fall in one shard and every replica computes the
//! same shard for a record, whatever its version or platform.

use kix_api::Activation;
use kix_api::labels::LABEL_SHARD;

/// A shard's number, `0..count`.
pub type Shard = u32;

/// A record whose `kix.run/shard` label names no shard of this operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "label {LABEL_SHARD}={value:?} is not a shard of this operator (an integer from 0 to {last}, \
     --shards {count}): nothing of this record is acted on until it is"
)]
pub struct BadShard {
    pub value: String,
    pub count: u32,
    pub last: u32,
    /// The shard of its Kix cluster's name: the replica holding it reports
    /// the bad label, so one replica writes it.
    pub fallback: Shard,
}

/// The shard of `record` among `count` (at least 1).
pub fn shard_of(record: &Activation, count: u32) -> Result<Shard, BadShard> {
    let label = record
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_SHARD));
    shard_for(record.cluster_name(), label.map(String::as_str), count)
}

/// The shard of a record of Kix cluster `cluster` whose `kix.run/shard`
/// label is `label`, among `count` shards.
pub fn shard_for(cluster: &str, label: Option<&str>, count: u32) -> Result<Shard, BadShard> {
    let count = count.max(1);
    let fallback = hash_shard(cluster, count);
    let Some(value) = label else {
        return Ok(fallback);
    };
    // Digits only: "+1" or " 1" would parse in some readers and not others.
    match value.parse::<u32>() {
        Ok(shard) if shard < count && value.bytes().all(|b| b.is_ascii_digit()) => Ok(shard),
        _ => Err(BadShard {
            value: value.to_owned(),
            count,
            last: count - 1,
            fallback,
        }),
    }
}

/// 64-bit FNV-1a of the Kix cluster's name, modulo `count`. Written out
/// (std's `DefaultHasher` promises no stable output): every replica and
/// every version of the operator gives a name the same shard.
pub fn hash_shard(cluster: &str, count: u32) -> Shard {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = cluster.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    // The remainder is below count, a u32.
    u32::try_from(hash % u64::from(count.max(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kix_cluster_name_has_a_stable_shard() {
        // FNV-1a 64 of "" is its offset basis; of "a", 0xaf63dc4c8601ec8c.
        assert_eq!(
            hash_shard("", 1 << 31),
            (0xcbf2_9ce4_8422_2325u64 % (1 << 31)) as u32
        );
        assert_eq!(
            hash_shard("a", 1 << 31),
            (0xaf63_dc4c_8601_ec8cu64 % (1 << 31)) as u32
        );
        // Pinned: a change here moves Kix clusters between shards on upgrade.
        let pinned: Vec<Shard> = ["prod", "staging", "infra", "team-a", "team-b"]
            .iter()
            .map(|c| hash_shard(c, 4))
            .collect();
        assert_eq!(pinned, PINNED_4);
        assert_eq!(hash_shard("prod", 1), 0);
        assert_eq!(hash_shard("prod", 0), 0, "no shards counts as one");
    }

    /// `hash_shard` of prod, staging, infra, team-a, team-b among 4.
    const PINNED_4: [Shard; 5] = [0, 2, 1, 2, 3];

    #[test]
    fn names_spread_over_the_shards() {
        let mut counts = [0u32; 4];
        for i in 0..400 {
            counts[hash_shard(&format!("cluster-{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|&n| n > 60), "{counts:?}");
    }

    #[test]
    fn the_label_wins_over_the_hash() {
        assert_eq!(shard_for("prod", Some("3"), 4), Ok(3));
        assert_eq!(shard_for("prod", Some("0"), 4), Ok(0));
        assert_eq!(shard_for("prod", None, 4), Ok(hash_shard("prod", 4)));
    }

    #[test]
    fn a_label_that_names_no_shard_is_refused_with_the_hash_shard_to_report_it() {
        for bad in ["4", "-1", "one", "", " 1", "+1", "99999999999"] {
            let err = shard_for("prod", Some(bad), 4).expect_err(bad);
            assert_eq!(err.value, bad);
            assert_eq!(err.fallback, hash_shard("prod", 4));
            assert!(err.to_string().contains("an integer from 0 to 3"), "{err}");
        }
    }
}
