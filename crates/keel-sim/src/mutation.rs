//! The deliberately broken variants `--mutation` switches on: the protocol's and the runtime's
//! (`keel_core::Mutation`, branches in keel-core, keel-wal and keel-engine) and the Redis
//! server's (`keel_redis::Mutation`, branches in keel-redis and keel-session). One name space
//! for the command line; each layer is handed only the variants it knows.

/// A broken variant of one layer of the code the simulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    Core(keel_core::Mutation),
    #[cfg(feature = "kv")]
    Redis(keel_redis::Mutation),
}

impl Mutation {
    /// Every variant, the protocol's and runtime's first.
    pub fn all() -> impl Iterator<Item = Mutation> {
        let core = keel_core::Mutation::ALL.into_iter().map(Mutation::Core);
        #[cfg(feature = "kv")]
        let core = core.chain(keel_redis::Mutation::ALL.into_iter().map(Mutation::Redis));
        core
    }

    pub fn name(self) -> &'static str {
        match self {
            Mutation::Core(m) => m.name(),
            #[cfg(feature = "kv")]
            Mutation::Redis(m) => m.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Mutation> {
        Mutation::all().find(|m| m.name() == name)
    }
}

/// The part of a run's mutation a layer is handed.
pub trait Layers {
    /// For keel-core, keel-wal and keel-engine.
    fn core(self) -> Option<keel_core::Mutation>;
    /// For keel-redis and keel-session.
    #[cfg(feature = "kv")]
    fn redis(self) -> Option<keel_redis::Mutation>;
}

impl Layers for Option<Mutation> {
    fn core(self) -> Option<keel_core::Mutation> {
        match self {
            Some(Mutation::Core(m)) => Some(m),
            #[cfg(feature = "kv")]
            _ => None,
            #[cfg(not(feature = "kv"))]
            None => None,
        }
    }

    #[cfg(feature = "kv")]
    fn redis(self) -> Option<keel_redis::Mutation> {
        match self {
            Some(Mutation::Redis(m)) => Some(m),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let names: Vec<&str> = Mutation::all().map(Mutation::name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "a name is used twice: {names:?}");
        for m in Mutation::all() {
            assert_eq!(Mutation::from_name(m.name()), Some(m));
        }
        assert_eq!(Mutation::from_name("no-such-bug"), None);
    }

    #[test]
    #[cfg(feature = "kv")]
    fn each_layer_gets_only_its_own() {
        let dedup = Some(Mutation::Redis(keel_redis::Mutation::DedupOff));
        assert_eq!(dedup.redis(), Some(keel_redis::Mutation::DedupOff));
        assert_eq!(dedup.core(), None);
        let core = Some(Mutation::Core(keel_core::Mutation::CommitOldTerm));
        assert_eq!(core.core(), Some(keel_core::Mutation::CommitOldTerm));
        assert_eq!(core.redis(), None);
    }
}
