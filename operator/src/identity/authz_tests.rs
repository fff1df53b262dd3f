use super::*;
use crate::identity::fixtures::{NS, gateway_chain};

async fn decide(
    chain: &crate::identity::fixtures::Chain,
    caller: &PodCaller,
) -> Result<(), Denial> {
    let w = MemoryWorkloads::default();
    chain.load(&w);
    authorize(&w, caller, None).await.unwrap()
}

#[tokio::test]
async fn a_managed_gateway_pod_is_allowed() {
    let chain = gateway_chain("gw-5d9f-abcde");
    assert_eq!(decide(&chain, &chain.caller()).await, Ok(()));
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
    let w = MemoryWorkloads::default();
    chain.load(&w);
    let only_other = vec!["elsewhere".to_owned()];
    assert_eq!(
        authorize(&w, &chain.caller(), Some(&only_other))
            .await
            .unwrap(),
        Err(Denial::Namespace)
    );
    let ours = vec![NS.to_owned()];
    assert_eq!(
        authorize(&w, &chain.caller(), Some(&ours)).await.unwrap(),
        Ok(())
    );
    w.set_unavailable(true);
    assert!(authorize(&w, &chain.caller(), None).await.is_err());
}
