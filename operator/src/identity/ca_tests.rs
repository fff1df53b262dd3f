use super::*;
use crate::identity::csr::public_key_of;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

const DAY: Duration = Duration::from_secs(24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn params() -> CaParams {
    CaParams {
        ca_lifetime: 100 * DAY,
        overlap: 10 * DAY,
        publish_lead: HOUR,
        leaf_lifetime: DAY,
    }
}

fn der_of(pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .unwrap()
        .1
        .contents
}

fn with_cert<R>(pem: &str, f: impl FnOnce(&X509Certificate<'_>) -> R) -> R {
    let der = der_of(pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    f(&cert)
}

fn verifies_against(leaf_pem: &str, ca: &CaCert) -> bool {
    let ca_der = der_of(ca.cert_pem());
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
    with_cert(leaf_pem, |leaf| {
        leaf.verify_signature(Some(ca_cert.public_key())).is_ok()
            && leaf.issuer() == ca_cert.subject()
    })
}

fn bundle_count(set: &CaSet, now: SystemTime) -> usize {
    set.bundle_pem(now).matches("BEGIN CERTIFICATE").count()
}

fn workload_csr(sans: Vec<String>) -> (KeyPair, String) {
    let key = KeyPair::generate().unwrap();
    let csr = CertificateParams::new(sans)
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    (key, csr)
}

#[test]
fn default_params_are_consistent_and_bad_ones_are_all_reported() {
    CaParams::default().validate().unwrap();
    let bad = CaParams {
        ca_lifetime: HOUR,
        overlap: Duration::ZERO,
        publish_lead: HOUR,
        leaf_lifetime: Duration::from_secs(1),
    };
    let Err(CaError::Params(problems)) = bad.validate() else {
        panic!("accepted");
    };
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn workload_leaf_has_one_spiffe_uri_both_ekus_and_a_day_of_life() {
    let set = CaSet::default().rotated(t0(), &params()).unwrap().unwrap();
    let now = t0() + 2 * HOUR;
    // The CSR asks for names of its own: they must not appear in the certificate.
    let (key, csr) = workload_csr(vec![
        "evil.example".into(),
        "spiffe://evil/prod/worker/admin".into(),
    ]);
    let spki = public_key_of(&csr).unwrap();
    let id = "spiffe://proxy-pool.local/prod/worker/gw-abc";
    let leaf = set.sign_workload(now, &params(), &spki, id, DAY).unwrap();

    with_cert(&leaf.pem, |c| {
        let san = c.subject_alternative_name().unwrap().unwrap();
        assert!(san.critical || !c.subject().as_raw().is_empty());
        assert_eq!(san.value.general_names, vec![GeneralName::URI(id)]);
        let eku = c.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && eku.server_auth);
        assert!(!eku.any && !eku.code_signing && eku.other.is_empty());
        let bc = c.basic_constraints().unwrap().unwrap().value;
        assert!(!bc.ca);
        let ku = c.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        let life = c.validity().not_after.timestamp() - c.validity().not_before.timestamp();
        assert_eq!(life, (DAY + BACKDATE).as_secs() as i64);
        assert_eq!(c.public_key().raw, key.subject_public_key_info());
    });
    assert_eq!(leaf.not_after, now + DAY);
    assert!(verifies_against(&leaf.pem, &set.cas()[0]));
}

#[test]
fn leaves_never_outlive_their_signer() {
    let set = CaSet::default().rotated(t0(), &params()).unwrap().unwrap();
    let ca_end = set.cas()[0].not_after();
    let (_, csr) = workload_csr(vec![]);
    let spki = public_key_of(&csr).unwrap();
    // Without rotation (the set as it is), 2 h before the CA expires.
    let leaf = set
        .sign_workload(
            ca_end - 2 * HOUR,
            &params(),
            &spki,
            "spiffe://td/env/worker/p",
            DAY,
        )
        .unwrap();
    assert_eq!(leaf.not_after, ca_end);
    assert!(matches!(
        set.sign_workload(ca_end, &params(), &spki, "spiffe://td/env/worker/p", DAY),
        Err(CaError::NoSigner)
    ));
}

#[test]
fn rotation_overlaps_old_and_new_then_drops_the_old() {
    let p = params();
    let (_, csr) = workload_csr(vec![]);
    let spki = public_key_of(&csr).unwrap();
    let sign = |set: &CaSet, at: SystemTime| {
        set.sign_workload(at, &p, &spki, "spiffe://td/env/worker/p", DAY)
            .unwrap()
    };

    // Fresh install: one CA, in the bundle, signing at once.
    let set = CaSet::default().rotated(t0(), &p).unwrap().unwrap();
    let a = Arc::clone(&set.cas()[0]);
    assert_eq!(bundle_count(&set, t0()), 1);
    assert!(verifies_against(&sign(&set, t0()).pem, &a));

    // Nothing to do until overlap + lead before A's expiry.
    let rotate = a.not_after() - p.overlap - p.publish_lead;
    assert!(
        set.rotated(rotate - Duration::from_secs(1), &p)
            .unwrap()
            .is_none()
    );
    assert!(set.next_change(t0() + 2 * HOUR, &p).unwrap() <= rotate);

    // B is generated and trusted at once, but A keeps signing for the publish lead.
    let set = set.rotated(rotate, &p).unwrap().unwrap();
    assert_eq!(set.cas().len(), 2);
    let b = Arc::clone(&set.cas()[1]);
    assert_eq!(bundle_count(&set, rotate), 2);
    assert!(set.bundle_pem(rotate).contains(a.cert_pem()));
    assert!(set.bundle_pem(rotate).contains(b.cert_pem()));
    let during_lead = sign(&set, rotate + p.publish_lead / 2);
    assert!(verifies_against(&during_lead.pem, &a));
    // The last leaves of A expire before A does.
    assert!(during_lead.not_after < a.not_after());

    // After the lead: B signs, both stay trusted for the overlap.
    let after_lead = rotate + p.publish_lead + Duration::from_secs(1);
    assert!(set.rotated(after_lead, &p).unwrap().is_none());
    let leaf = sign(&set, after_lead);
    assert!(verifies_against(&leaf.pem, &b));
    assert!(!verifies_against(&leaf.pem, &a));
    assert_eq!(bundle_count(&set, a.not_after() - HOUR), 2);

    // A expires: it leaves the bundle, B alone remains and B is not rotated yet.
    let set = set.rotated(a.not_after(), &p).unwrap().unwrap();
    assert_eq!(set.cas().len(), 1);
    assert_eq!(set.bundle_pem(a.not_after()), b.cert_pem());
    assert!(verifies_against(&sign(&set, a.not_after()).pem, &b));
}

#[test]
fn an_operator_down_past_expiry_starts_a_fresh_ca() {
    let p = params();
    let set = CaSet::default().rotated(t0(), &p).unwrap().unwrap();
    let late = set.cas()[0].not_after() + DAY;
    let fresh = set.rotated(late, &p).unwrap().unwrap();
    assert_eq!(fresh.cas().len(), 1);
    assert!(fresh.cas()[0].not_before() <= late && late < fresh.cas()[0].not_after());
}

#[test]
fn stored_material_round_trips_and_mismatched_keys_are_refused() {
    let a = CaCert::generate(t0(), DAY * 30).unwrap();
    let b = CaCert::generate(t0(), DAY * 30).unwrap();
    let again = CaCert::from_pem(a.cert_pem(), a.key_pem()).unwrap();
    assert_eq!(again.not_after(), a.not_after());
    assert!(matches!(
        CaCert::from_pem(a.cert_pem(), b.key_pem()),
        Err(CaError::Stored(_))
    ));
    with_cert(a.cert_pem(), |c| {
        let bc = c.basic_constraints().unwrap().unwrap().value;
        assert!(bc.ca);
        assert_eq!(bc.path_len_constraint, Some(0));
    });
}

#[test]
fn serving_certificates_carry_dns_and_ip_names_and_server_auth_only() {
    let set = CaSet::default().rotated(t0(), &params()).unwrap().unwrap();
    let key = KeyPair::generate().unwrap();
    let names = vec!["issuer.ns.svc".to_owned(), "127.0.0.1".to_owned()];
    let leaf = set.sign_serving(t0(), &params(), &key, &names).unwrap();
    with_cert(&leaf.pem, |c| {
        let san = c.subject_alternative_name().unwrap().unwrap().value;
        assert!(
            san.general_names
                .contains(&GeneralName::DNSName("issuer.ns.svc"))
        );
        assert_eq!(san.general_names.len(), 2);
        let eku = c.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
    });
}
