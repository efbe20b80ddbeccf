//! The set commands (SADD, SMEMBERS, SINTER, SPOP, ...), with Redis's replies. Members leave in
//! ascending byte order (`keel_redis_types::set`), so every replica answers the same.

use bytes::Bytes;

use super::list_commands::owned;
use super::Set;
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::keyspace_commands::keyed_hash;
use keel_redis_types::set::SetAlgebra;
use keel_resp::Reply;

use crate::state_machine::{KvStateMachine, WriteError, WriteReply};

/// What Redis answers as a set (SMEMBERS, SINTER, SUNION, SDIFF, SPOP with a count).
fn members_reply(members: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Set(members.into_iter().map(Reply::Bulk).collect())
}

/// SRANDMEMBER's members, which may repeat: an array, as in Redis.
fn drawn_reply(members: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Array(members.into_iter().map(Reply::Bulk).collect())
}

impl KvStateMachine {
    pub(super) fn sadd(&mut self, key: &[u8], members: &[Bytes]) -> WriteAnswer {
        let added = self.change(key, true, |set: &mut Set| {
            members.iter().filter(|m| set.insert(owned(m))).count()
        });
        match added {
            Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    pub(super) fn srem(&mut self, key: &[u8], members: &[Bytes]) -> WriteAnswer {
        let removed = self.change(key, false, |set: &mut Set| {
            members.iter().filter(|m| set.remove(m)).count()
        });
        match removed {
            Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    /// SMOVE: 1 if `member` moved from `source` to `destination` (both checked to be sets
    /// first), 0 if `source` does not hold it.
    pub(super) fn smove(
        &mut self,
        source: &[u8],
        destination: &[u8],
        member: &Bytes,
    ) -> WriteAnswer {
        self.expire_if_due(destination);
        if let Err(error) = self.collection::<Set>(destination) {
            return error.into();
        }
        match self.change(source, false, |set: &mut Set| set.remove(member)) {
            Err(error) => error.into(),
            Ok(None | Some(false)) => WriteReply::Integer(0).into(),
            Ok(Some(true)) => {
                let moved = owned(member);
                if let Err(error) =
                    self.change(destination, true, |set: &mut Set| set.insert(moved))
                {
                    debug_assert!(false, "the destination was checked: {error}");
                }
                WriteReply::Integer(1).into()
            }
        }
    }

    /// SPOP: without a count one member or null, with one a set. The members are those of
    /// least hash under the entry's index: arbitrary, but the same on every replica.
    pub(super) fn spop(&mut self, key: &[u8], count: Option<u64>) -> WriteAnswer {
        let index = self.applied_index.to_le_bytes();
        let popped = self.change(key, false, |set: &mut Set| {
            set.pop_least_hashed(count.unwrap_or(1), &index)
        });
        match (popped, count) {
            (Err(error), _) => error.into(),
            (Ok(None), None) => WriteAnswer::Value(Reply::Null),
            (Ok(None), Some(_)) => WriteAnswer::Value(Reply::Set(Vec::new())),
            (Ok(Some(mut chosen)), None) => {
                WriteAnswer::Value(chosen.pop().map_or(Reply::Null, Reply::Bulk))
            }
            (Ok(Some(chosen)), Some(_)) => WriteAnswer::Value(members_reply(chosen)),
        }
    }

    /// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: `destination` becomes the result (removed if it
    /// is empty), whatever it held; the result's size.
    pub(super) fn sstore(
        &mut self,
        algebra: SetAlgebra,
        destination: &[u8],
        keys: &[Bytes],
    ) -> WriteAnswer {
        for key in keys {
            self.expire_if_due(key);
        }
        let result = match self.set_algebra(algebra, keys) {
            Ok(result) => result,
            Err(error) => return error.into(),
        };
        self.store_result(destination, result)
    }

    /// The result of SINTER, SUNION or SDIFF over `keys` (a missing key is the empty set).
    pub(super) fn set_algebra(
        &self,
        algebra: SetAlgebra,
        keys: &[Bytes],
    ) -> Result<Set, WriteError> {
        let sets = keys
            .iter()
            .map(|key| self.collection::<Set>(key))
            .collect::<Result<Vec<_>, _>>()?;
        let empty = Set::default();
        let sets: Vec<&Set> = sets.into_iter().map(|s| s.unwrap_or(&empty)).collect();
        Ok(Set::algebra(algebra, &sets))
    }

    pub(super) fn set_algebra_reply(
        &self,
        algebra: SetAlgebra,
        keys: &[Bytes],
    ) -> Result<Reply, WriteError> {
        let result = self.set_algebra(algebra, keys)?;
        Ok(members_reply(result.sorted().into_iter().cloned()))
    }

    pub(super) fn sintercard(&self, keys: &[Bytes], limit: u64) -> Result<Reply, WriteError> {
        let size = self.set_algebra(SetAlgebra::Inter, keys)?.len_u64();
        Ok(Reply::Integer(
            if limit == 0 { size } else { size.min(limit) } as i64,
        ))
    }

    pub(super) fn smembers(&self, key: &[u8]) -> Result<Reply, WriteError> {
        let set = self.collection::<Set>(key)?;
        Ok(members_reply(
            set.map(Set::sorted)
                .unwrap_or_default()
                .into_iter()
                .cloned(),
        ))
    }

    /// SRANDMEMBER: a read, so any draw will do (not replicated): members ranked by a hash
    /// under the applied index and a per-state-machine counter, as RANDOMKEY draws.
    pub(super) fn srandmember(&self, key: &[u8], count: Option<i64>) -> Result<Reply, WriteError> {
        let members = self
            .collection::<Set>(key)?
            .map(Set::sorted)
            .unwrap_or_default();
        let (k0, k1) = (self.applied_index, self.random_draws.next());
        let rank = |salt: u64, m: &Bytes| keyed_hash(k0, k1 ^ salt, m);
        let ranked = || {
            let mut ranked: Vec<(u64, &Bytes)> = members.iter().map(|m| (rank(0, m), *m)).collect();
            ranked.sort_unstable();
            ranked
        };
        Ok(match count {
            None => ranked()
                .first()
                .map_or(Reply::Null, |(_, m)| Reply::Bulk((*m).clone())),
            Some(n) if n >= 0 => drawn_reply(
                ranked()
                    .into_iter()
                    .take(n as usize)
                    .map(|(_, m)| m.clone()),
            ),
            Some(_) if members.is_empty() => Reply::Array(Vec::new()),
            Some(n) => drawn_reply((0..n.unsigned_abs()).map(|draw| {
                let at = keyed_hash(k0, k1, &draw.to_le_bytes()) % members.len() as u64;
                members[at as usize].clone()
            })),
        })
    }

    pub(super) fn sismember(&self, key: &[u8], member: &[u8]) -> Result<bool, WriteError> {
        Ok(self
            .collection::<Set>(key)?
            .is_some_and(|s| s.contains(member)))
    }
}
