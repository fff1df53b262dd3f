//! The Lua scripts: a shared prelude (plus an ownership or session helper file where
//! needed) and one body per operation, composed at compile time.

use std::sync::LazyLock;

macro_rules! lua {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("lua/", $file)), "\n"),+)
    };
}

/// One script per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Script {
    Upsert,
    Remove,
    Health,
    Extract,
    Assign,
    Renew,
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
}

impl Script {
    pub(crate) const ALL: [Script; 31] = [
        Script::Upsert,
        Script::Remove,
        Script::Health,
        Script::Extract,
        Script::Assign,
        Script::Renew,
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
    ];

    /// The writes only the leader makes: with a fenced adapter they carry its fencing
    /// token and are refused (`fenced`) once a newer leader exists.
    pub(crate) fn leader_write(self) -> bool {
        matches!(
            self,
            Script::Upsert
                | Script::Remove
                | Script::Health
                | Script::Assign
                | Script::Renew
                | Script::Drain
                | Script::AckDrain
                | Script::Expire
                | Script::Purge
                | Script::CombosGc
                | Script::DemandTake
                | Script::CheckBegin
                | Script::CheckEnd
        )
    }

    /// Short name for logs and operation digests.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Script::Upsert => "upsert",
            Script::Remove => "remove",
            Script::Health => "health",
            Script::Extract => "extract",
            Script::Assign => "assign",
            Script::Renew => "renew",
            Script::Drain => "drain",
            Script::AckDrain => "ack_drain",
            Script::OwnerGet => "owner_get",
            Script::Expire => "expire",
            Script::Register => "register",
            Script::Ack => "ack",
            Script::Reject => "reject",
            Script::SessionGet => "session_get",
            Script::Report => "report",
            Script::RuntimeGet => "runtime_get",
            Script::Inventory => "inventory",
            Script::Records => "records",
            Script::Assignable => "assignable",
            Script::Purge => "purge",
            Script::Leases => "leases",
            Script::CombosGc => "combos_gc",
            Script::LeaderAcquire => "leader_acquire",
            Script::LeaderRenew => "leader_renew",
            Script::LeaderRelease => "leader_release",
            Script::DemandPush => "demand_push",
            Script::DemandTake => "demand_take",
            Script::Generation => "generation",
            Script::LeaderToken => "leader_token",
            Script::CheckBegin => "check_begin",
            Script::CheckEnd => "check_end",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Script::Upsert => lua!("prelude.lua", "upsert.lua"),
            Script::Remove => lua!("prelude.lua", "remove.lua"),
            Script::Health => lua!("prelude.lua", "health.lua"),
            Script::Extract => lua!("prelude.lua", "extract.lua"),
            Script::Assign => lua!("prelude.lua", "owner.lua", "assign.lua"),
            Script::Renew => lua!("prelude.lua", "owner.lua", "renew.lua"),
            Script::Drain => lua!("prelude.lua", "owner.lua", "drain.lua"),
            Script::AckDrain => lua!("prelude.lua", "owner.lua", "ack_drain.lua"),
            Script::OwnerGet => lua!("prelude.lua", "owner_get.lua"),
            Script::Expire => lua!("prelude.lua", "owner.lua", "expire.lua"),
            Script::Register => lua!("prelude.lua", "session.lua", "register.lua"),
            Script::Ack => lua!("prelude.lua", "session.lua", "ack.lua"),
            Script::Reject => lua!("prelude.lua", "session.lua", "reject.lua"),
            Script::SessionGet => lua!("prelude.lua", "session.lua", "session_get.lua"),
            Script::Report => lua!("prelude.lua", "session.lua", "report.lua"),
            Script::RuntimeGet => lua!("prelude.lua", "session.lua", "runtime_get.lua"),
            Script::Inventory => lua!("prelude.lua", "session.lua", "inventory.lua"),
            Script::Records => lua!("prelude.lua", "records.lua"),
            Script::Assignable => lua!("prelude.lua", "assignable.lua"),
            Script::Purge => lua!("prelude.lua", "purge.lua"),
            Script::Leases => lua!("prelude.lua", "leases.lua"),
            Script::CombosGc => lua!("prelude.lua", "combos_gc.lua"),
            Script::LeaderAcquire => lua!("prelude.lua", "leader.lua", "leader_acquire.lua"),
            Script::LeaderRenew => lua!("prelude.lua", "leader_renew.lua"),
            Script::LeaderRelease => lua!("prelude.lua", "leader_release.lua"),
            Script::DemandPush => lua!("prelude.lua", "demand_push.lua"),
            Script::DemandTake => lua!("prelude.lua", "demand_take.lua"),
            Script::Generation => lua!("prelude.lua", "generation.lua"),
            Script::LeaderToken => lua!("prelude.lua", "leader.lua", "leader_token.lua"),
            Script::CheckBegin => lua!("prelude.lua", "check_begin.lua"),
            Script::CheckEnd => lua!("prelude.lua", "check_end.lua"),
        }
    }

    /// SHA-1 of the source, as `SCRIPT LOAD` returns it.
    pub(crate) fn sha(self) -> &'static str {
        &SHAS[self as usize]
    }

    pub(crate) fn code(self) -> &'static str {
        self.source()
    }
}

static SHAS: LazyLock<Vec<String>> = LazyLock::new(|| {
    Script::ALL
        .iter()
        .map(|s| ::redis::Script::new(s.source()).get_hash().to_owned())
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
