//! The activity pool contract, run on every implementation: each case below runs as
//! `<case>_memory` and `<case>_redis` (a real `redis-server` started per case on a free
//! loopback port).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod contract;

macro_rules! contract_cases {
    ($($group:ident :: $case:ident),* $(,)?) => {
        paste::paste! {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn [<$case _memory>]() {
                    contract::$group::$case(contract::Kind::Memory).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn [<$case _redis>]() {
                    contract::$group::$case(contract::Kind::Redis).await;
                }
            )*
        }
    };
}

contract_cases! {
    lifecycle::vendor_ttl_and_safety_margin,
    lifecycle::invalid_candidates_dropped_with_reason,
    lifecycle::invalid_batch_fails_before_storage,
    lifecycle::max_size_is_a_hard_limit,
    lifecycle::duplicate_refresh_extends_life,
    lifecycle::cross_vendor_incumbent_wins,
    lifecycle::extracted_never_reenters,
    lifecycle::upsert_retry_with_same_operation_is_idempotent,
    lifecycle::health_moves_proxies_in_and_out_of_every_index,
    lifecycle::sustained_churn_stays_bounded_and_consistent,
    extract::partial_and_all_or_nothing,
    extract::extracted_proxy_carries_connection_details,
    extract::filters_or_within_and_across,
    extract::city_filters_select_by_city,
    extract::invalid_filters_are_refused,
    extract::remaining_ttl_and_health_freshness,
    extract::reserve_for_gateway_is_kept_back,
    extract::scan_budget_exhausted_is_unavailable,
    extract::idempotent_replay_and_conflict,
    extract::request_id_does_not_replay,
    extract::stored_result_expires_with_earliest_proxy,
    extract::concurrent_extracts_are_disjoint,
    extract::filtered_extraction_walks_combinations_in_turn,
    ownership::assign_and_renew,
    ownership::drain_and_acknowledge,
    ownership::expire_is_bounded,
    ownership::assign_vs_extract_exactly_one_wins,
    ownership::hard_expiry_ends_the_assignment,
    ownership::leases_page_through_live_assignments,
    ownership::batches_judge_each_entry_alone,
    ownership::concurrent_batches_assign_each_proxy_once,
    ownership::change_feed_follows_record_writes,
    runtime::report_sequence_rules,
    runtime::new_session_fences_the_old_instance,
    runtime::negative_ack_closes_the_fence,
    runtime::epoch_isolation,
    runtime::inventory_figures_and_fail_closed,
    runtime::inventory_over_budget_fails_closed,
    runtime::sessions_expire_by_pool_time,
    generation::a_new_generation_holds_back_each_upstream_for_its_quarantine,
    generation::quarantine_above_the_maximum_ttl_is_refused,
    checks::a_marked_proxy_is_not_extracted_until_its_check_ends,
    checks::a_mark_ends_by_itself_after_its_hold,
    checks::a_mark_on_a_taken_proxy_is_refused,
    checks::a_later_check_never_shortens_an_earlier_mark,
    checks::gateway_assignment_ignores_marks,
    checks::invalid_marks_are_refused,
    checks::invalid_marks_name_their_field_and_change_nothing,
}
