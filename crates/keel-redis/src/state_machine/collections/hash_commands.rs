//! The hash commands (HSET, HGET, HINCRBY, ...), with Redis's replies.

use bytes::Bytes;

use super::list_commands::owned;
use super::Hash;
use crate::command::HSetReply;
use crate::state_machine::execute::WriteAnswer;
use crate::state_machine::{KvStateMachine, WriteError, WriteReply};
use keel_resp::Reply;

impl KvStateMachine {
    /// HSET (how many fields are new), HMSET (`+OK`), HSETNX (1 set, 0 the field existed).
    pub(super) fn hset(
        &mut self,
        key: &[u8],
        pairs: &[(Bytes, Bytes)],
        reply: HSetReply,
    ) -> WriteAnswer {
        let added = self.change(key, true, |hash: &mut Hash| {
            if reply == HSetReply::IfNew && hash.get(&pairs[0].0).is_some() {
                return 0;
            }
            pairs
                .iter()
                .filter(|(field, value)| hash.insert(owned(field), owned(value)))
                .count()
        });
        match (added, reply) {
            (Err(error), _) => error.into(),
            (Ok(_), HSetReply::Ok) => WriteReply::Ok.into(),
            (Ok(added), _) => WriteReply::Integer(added.unwrap_or(0) as i64).into(),
        }
    }

    pub(super) fn hdel(&mut self, key: &[u8], fields: &[Bytes]) -> WriteAnswer {
        let removed = self.change(key, false, |hash: &mut Hash| {
            fields.iter().filter(|field| hash.remove(field)).count()
        });
        match removed {
            Ok(n) => WriteReply::Integer(n.unwrap_or(0) as i64).into(),
            Err(error) => error.into(),
        }
    }

    pub(super) fn hincrby(&mut self, key: &[u8], field: &Bytes, delta: i64) -> WriteAnswer {
        let result = self.change(key, true, |hash: &mut Hash| {
            hash.incr_by(owned(field), delta)
        });
        match result {
            Err(error) => error.into(),
            Ok(Some(Err(error))) => WriteError::from(error).into(),
            Ok(Some(Ok(new))) => WriteReply::Integer(new).into(),
            Ok(None) => unreachable!("created when absent"),
        }
    }

    pub(super) fn hincrbyfloat(&mut self, key: &[u8], field: &Bytes, delta: f64) -> WriteAnswer {
        let result = self.change(key, true, |hash: &mut Hash| {
            hash.incr_by_float(owned(field), delta)
        });
        match result {
            Err(error) => error.into(),
            Ok(Some(Err(error))) => WriteError::from(error).into(),
            Ok(Some(Ok(text))) => WriteAnswer::Value(Reply::Bulk(text)),
            Ok(None) => unreachable!("created when absent"),
        }
    }

    pub(super) fn hash_field(
        &self,
        key: &[u8],
        field: &[u8],
    ) -> Result<Option<&Bytes>, WriteError> {
        Ok(self
            .collection::<Hash>(key)?
            .and_then(|hash| hash.get(field)))
    }

    /// HGETALL (a map), HKEYS and HVALS (arrays), fields in ascending order.
    pub(super) fn hash_pairs(
        &self,
        key: &[u8],
        keys: bool,
        values: bool,
    ) -> Result<Reply, WriteError> {
        let pairs = self
            .collection::<Hash>(key)?
            .map(Hash::sorted)
            .unwrap_or_default();
        let bulk = |b: &Bytes| Reply::Bulk(b.clone());
        Ok(match (keys, values) {
            (true, true) => {
                Reply::Map(pairs.into_iter().map(|(f, v)| (bulk(f), bulk(v))).collect())
            }
            (true, false) => Reply::Array(pairs.into_iter().map(|(f, _)| bulk(f)).collect()),
            _ => Reply::Array(pairs.into_iter().map(|(_, v)| bulk(v)).collect()),
        })
    }
}
