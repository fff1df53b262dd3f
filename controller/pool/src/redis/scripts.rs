//! The Lua scripts: a shared prelude (plus an ownership or session helper file where
//! needed) and one body per operation, composed at compile time.

use std::sync::LazyLock;

/// A script's short name and its source: the prelude, the helper files `lib`, then
/// its body `lua/<name>.lua`, each followed by a newline.
macro_rules! script {
    ($name:literal $(, $lib:literal)*) => {
        (
            $name,
            concat!(
                include_str!("lua/prelude.lua"),
                "\n",
                $(include_str!(concat!("lua/", $lib)), "\n",)*
                include_str!(concat!("lua/", $name, ".lua")),
                "\n"
            ),
        )
    };
}

/// One script per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Script {
    Upsert,
    Remove,
    Health,
    Extract,
    Drain,
    AckDrain,
    OwnerGet,
    Expire,
    Register,
    Ack,
    Reject,
    SessionGet,
    Report,
    RuntimeGet,
    Inventory,
    Records,
    Assignable,
    Purge,
    Leases,
    CombosGc,
    LeaderAcquire,
    LeaderRenew,
    LeaderRelease,
    DemandPush,
    DemandTake,
    Generation,
    LeaderToken,
    CheckBegin,
    CheckEnd,
    AssignMany,
    RenewMany,
    Changes,
}

impl Script {
    pub(crate) const ALL: [Script; 32] = [
        Script::Upsert,
        Script::Remove,
        Script::Health,
        Script::Extract,
        Script::Drain,
        Script::AckDrain,
        Script::OwnerGet,
        Script::Expire,
        Script::Register,
        Script::Ack,
        Script::Reject,
        Script::SessionGet,
        Script::Report,
        Script::RuntimeGet,
        Script::Inventory,
        Script::Records,
        Script::Assignable,
        Script::Purge,
        Script::Leases,
        Script::CombosGc,
        Script::LeaderAcquire,
        Script::LeaderRenew,
        Script::LeaderRelease,
        Script::DemandPush,
        Script::DemandTake,
        Script::Generation,
        Script::LeaderToken,
        Script::CheckBegin,
        Script::CheckEnd,
        Script::AssignMany,
        Script::RenewMany,
        Script::Changes,
    ];

    /// The writes only the leader makes: with a fenced adapter they carry its fencing
    /// token and are refused (`fenced`) once a newer leader exists.
    pub(crate) fn leader_write(self) -> bool {
        matches!(
            self,
            Script::Upsert
                | Script::Remove
                | Script::Health
                | Script::Drain
                | Script::AckDrain
                | Script::Expire
                | Script::Purge
                | Script::CombosGc
                | Script::DemandTake
                | Script::CheckBegin
                | Script::CheckEnd
                | Script::AssignMany
                | Script::RenewMany
        )
    }

    /// The ownership writes: given only the index keys their records name (asked for by
    /// the script), never the key book.
    pub(crate) fn owner_write(self) -> bool {
        matches!(
            self,
            Script::Drain
                | Script::AckDrain
                | Script::Expire
                | Script::AssignMany
                | Script::RenewMany
        )
    }

    /// Short name (for logs and operation digests) and source.
    fn spec(self) -> (&'static str, &'static str) {
        match self {
            Script::Upsert => script!("upsert"),
            Script::Remove => script!("remove"),
            Script::Health => script!("health"),
            Script::Extract => script!("extract"),
            Script::Drain => script!("drain", "owner.lua"),
            Script::AckDrain => script!("ack_drain", "owner.lua"),
            Script::OwnerGet => script!("owner_get"),
            Script::Expire => script!("expire", "owner.lua"),
            Script::Register => script!("register", "session.lua"),
            Script::Ack => script!("ack", "session.lua"),
            Script::Reject => script!("reject", "session.lua"),
            Script::SessionGet => script!("session_get", "session.lua"),
            Script::Report => script!("report", "session.lua"),
            Script::RuntimeGet => script!("runtime_get", "session.lua"),
            Script::Inventory => script!("inventory", "session.lua"),
            Script::Records => script!("records"),
            Script::Assignable => script!("assignable"),
            Script::Purge => script!("purge"),
            Script::Leases => script!("leases"),
            Script::CombosGc => script!("combos_gc"),
            Script::LeaderAcquire => script!("leader_acquire", "leader.lua"),
            Script::LeaderRenew => script!("leader_renew"),
            Script::LeaderRelease => script!("leader_release"),
            Script::DemandPush => script!("demand_push"),
            Script::DemandTake => script!("demand_take"),
            Script::Generation => script!("generation"),
            Script::LeaderToken => script!("leader_token", "leader.lua"),
            Script::CheckBegin => script!("check_begin"),
            Script::CheckEnd => script!("check_end"),
            Script::AssignMany => script!("assign_many", "owner.lua"),
            Script::RenewMany => script!("renew_many", "owner.lua"),
            Script::Changes => script!("changes"),
        }
    }

    /// Short name for logs and operation digests.
    pub(crate) fn name(self) -> &'static str {
        self.spec().0
    }

    /// SHA-1 of the source, as `SCRIPT LOAD` returns it.
    pub(crate) fn sha(self) -> &'static str {
        &SHAS[self as usize]
    }

    /// The source.
    pub(crate) fn code(self) -> &'static str {
        self.spec().1
    }
}

static SHAS: LazyLock<Vec<String>> = LazyLock::new(|| {
    Script::ALL
        .iter()
        .map(|s| ::redis::Script::new(s.code()).get_hash().to_owned())
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_enum_order() {
        for (i, s) in Script::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(s.sha().len(), 40);
            assert!(s.code().contains("local NOW"));
        }
    }
}
