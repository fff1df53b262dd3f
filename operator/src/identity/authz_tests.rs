use super::*;
use crate::identity::fixtures::{
    CHECKER, Chain, NS, SA, checker_chain, checker_workload, gateway_chain,
};

/// The decision for `caller` with `chain`'s workloads loaded, under these rules.
async fn decide_with(
    chain: &Chain,
    caller: &PodCaller,
    checker: Option<&CheckerWorkload>,
    gateway_service_account: Option<&str>,
) -> Result<WorkloadKind, Denial> {
    let w = MemoryWorkloads::default();
    chain.load(&w);
    authorize(&w, caller, None, checker, gateway_service_account)
        .await
        .unwrap()
}

/// The decision with the checker rule configured, as the chart configures it.
async fn decide(chain: &Chain, caller: &PodCaller) -> Result<WorkloadKind, Denial> {
    decide_with(chain, caller, Some(&checker_workload()), Some(SA)).await
}

/// The decision for the chain's own pod with no rule configured: neither a checker
/// workload nor a gateway ServiceAccount.
async fn decide_without_rules(chain: &Chain) -> Result<WorkloadKind, Denial> {
    decide_with(chain, &chain.caller(), None, None).await
}

/// A managed gateway pod is a worker with or without the rules; a pod of the checker
/// Deployment is a checker under the checker rule and just unmanaged without it.
#[tokio::test]
async fn gateway_pods_are_workers_and_checker_pods_are_checkers_under_the_rule() {
    let cases = [
        (
            gateway_chain("gw-5d9f-abcde"),
            Ok(WorkloadKind::Worker),
            Ok(WorkloadKind::Worker),
        ),
        (
            checker_chain("proxy-pool-checker-5d9f-x2k4q"),
            Ok(WorkloadKind::Checker),
            Err(Denial::NotManaged),
        ),
    ];
    for (chain, with_rules, without_rules) in cases {
        assert_eq!(decide(&chain, &chain.caller()).await, with_rules);
        assert_eq!(decide_without_rules(&chain).await, without_rules);
    }
}

#[tokio::test]
async fn the_checker_rule_trusts_name_uid_namespace_and_service_account_not_labels() {
    let checker = checker_chain("proxy-pool-checker-5d9f-x2k4q");

    // Another Deployment, even one labelled like the checker: refused.
    let mut other = gateway_chain("other-5d9f-abcde");
    other
        .deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(COMPONENT_LABEL.into(), "checker".into());
    assert_eq!(
        decide(&other, &other.caller()).await,
        Err(Denial::NotManaged)
    );

    // The checker Deployment's pod under another ServiceAccount (pod and token agree).
    let mut c = checker.clone();
    c.pod.spec.as_mut().unwrap().service_account_name = Some("default".into());
    assert_eq!(
        decide(&c, &c.caller()).await,
        Err(Denial::CheckerServiceAccount)
    );

    // A Deployment of the checker's name recreated since (another UID).
    let mut c = checker.clone();
    c.deployment.metadata.uid = Some("uid-recreated".into());
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotOwned));

    // A bare pod claiming nothing, and a pod whose token names another pod.
    let mut c = checker.clone();
    c.pod.metadata.owner_references = None;
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotOwned));
    let mut caller = checker.caller();
    caller.pod_uid = "uid-of-an-earlier-pod".into();
    assert_eq!(decide(&checker, &caller).await, Err(Denial::UidMismatch));

    // The checker's name in another namespace.
    let elsewhere = CheckerWorkload {
        namespace: "elsewhere".into(),
        ..checker_workload()
    };
    assert_eq!(
        decide_with(&checker, &checker.caller(), Some(&elsewhere), None).await,
        Err(Denial::NotManaged)
    );
    // And a gateway Deployment never becomes a checker by its ServiceAccount (its pod
    // under the checker's account is not a gateway either).
    let mut gw = gateway_chain("gw-5d9f-abcde");
    gw.pod.spec.as_mut().unwrap().service_account_name = Some(CHECKER.into());
    assert_eq!(
        decide(&gw, &gw.caller()).await,
        Err(Denial::GatewayServiceAccount)
    );
}

#[tokio::test]
async fn every_broken_link_is_denied() {
    let chain = gateway_chain("gw-5d9f-abcde");

    let mut caller = chain.caller();
    caller.pod_uid = "uid-of-an-earlier-pod".into();
    assert_eq!(decide(&chain, &caller).await, Err(Denial::UidMismatch));

    let mut caller = chain.caller();
    caller.pod_name = "someone-else".into();
    assert_eq!(decide(&chain, &caller).await, Err(Denial::PodNotFound));

    let mut caller = chain.caller();
    caller.service_account = "default".into();
    assert_eq!(
        decide(&chain, &caller).await,
        Err(Denial::ServiceAccountMismatch)
    );

    let mut c = chain.clone();
    c.deployment.metadata.labels = None;
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotManaged));

    let mut c = chain.clone();
    c.deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(COMPONENT_LABEL.into(), "checker".into());
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotManaged));

    // A Deployment of the same name but another UID (deleted and recreated).
    let mut c = chain.clone();
    c.deployment.metadata.uid = Some("uid-new".into());
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotOwned));

    // Owner reference that is not the controller.
    let mut c = chain.clone();
    c.pod.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotOwned));

    // A bare pod.
    let mut c = chain.clone();
    c.pod.metadata.owner_references = None;
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::NotOwned));

    let mut c = chain.clone();
    c.pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Failed".into()),
        ..Default::default()
    });
    assert_eq!(decide(&c, &c.caller()).await, Err(Denial::Terminated));
}

#[tokio::test]
async fn namespaces_can_be_restricted_and_lookups_can_fail() {
    let chain = gateway_chain("gw-5d9f-abcde");
    let checker = checker_chain("proxy-pool-checker-5d9f-x2k4q");
    let w = MemoryWorkloads::default();
    chain.load(&w);
    checker.load(&w);
    let rule = checker_workload();
    let only_other = vec!["elsewhere".to_owned()];
    for c in [&chain, &checker] {
        assert_eq!(
            authorize(&w, &c.caller(), Some(&only_other), Some(&rule), None)
                .await
                .unwrap(),
            Err(Denial::Namespace)
        );
    }
    let ours = vec![NS.to_owned()];
    assert_eq!(
        authorize(&w, &chain.caller(), Some(&ours), Some(&rule), None)
            .await
            .unwrap(),
        Ok(WorkloadKind::Worker)
    );
    w.set_unavailable(true);
    assert!(
        authorize(&w, &chain.caller(), None, None, None)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_gateway_pod_under_another_service_account_is_refused() {
    // A pod placed into a managed gateway Deployment's ReplicaSet but running under a
    // ServiceAccount of someone else's choosing (the token and the pod agree on it).
    let mut chain = gateway_chain("gw-5d9f-abcde");
    chain.pod.spec.as_mut().unwrap().service_account_name = Some("default".into());
    assert_eq!(
        decide(&chain, &chain.caller()).await,
        Err(Denial::GatewayServiceAccount)
    );
    // Without the rule (an operator that names no gateway ServiceAccount) it passes.
    assert_eq!(decide_without_rules(&chain).await, Ok(WorkloadKind::Worker));
}
