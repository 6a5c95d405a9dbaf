//! The SDK's AWS Signature V4 signer against AWS's published signing test
//! suite (`aws-sig-v4-test-suite`, credentials `AKIDEXAMPLE`, service
//! `service`) and S3's documented GET Object example.

use ankusa_sdk::aws::{Credentials, SignRequest, Signer, amz_date, payload_sha256};

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn suite() -> Signer {
    let credentials = Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    };
    Signer::new(credentials, "us-east-1", "service")
}

fn suite_signature(method: &str, path: &str, query: &[(&str, &str)]) -> String {
    let headers = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")];
    let request = SignRequest { method, path, query, headers: &headers, payload_sha256: EMPTY_SHA256 };
    suite().sign(&request).expect("signed").signature
}

/// One request of the suite: (name, method, path, query, signature).
type Vector = (&'static str, &'static str, &'static str, &'static [(&'static str, &'static str)], &'static str);

#[test]
fn the_test_suites_requests_get_its_signatures() {
    let vectors: [Vector; 6] = [
        ("get-vanilla", "GET", "/", &[], "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        (
            "get-vanilla-query-order-key-case",
            "GET",
            "/",
            &[("Param2", "value2"), ("Param1", "value1")],
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
        ("get-utf8", "GET", "/\u{1234}", &[], "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
        (
            "get-space",
            "GET",
            "/example space/",
            &[],
            "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
        ),
        ("post-vanilla", "POST", "/", &[], "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
        (
            "post-vanilla-query",
            "POST",
            "/",
            &[("Param1", "value1")],
            "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
        ),
    ];
    for (name, method, path, query, expected) in vectors {
        assert_eq!(suite_signature(method, path, query), expected, "{name}");
    }
}

#[test]
fn the_authorization_header_names_the_key_scope_and_signed_headers() {
    let headers = [("host", "example.amazonaws.com"), ("x-amz-date", "20150830T123600Z")];
    let request = SignRequest { method: "GET", path: "/", query: &[], headers: &headers, payload_sha256: EMPTY_SHA256 };
    assert_eq!(
        suite().sign(&request).expect("signed").authorization,
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
    let undated = SignRequest { headers: &headers[..1], ..request };
    assert!(suite().sign(&undated).is_err(), "a request without x-amz-date is refused");
}

/// S3's documented example: GET Object with a range, the payload hash in
/// `x-amz-content-sha256`.
#[test]
fn s3s_get_object_example_gets_its_documented_signature() {
    let credentials = Credentials {
        access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    };
    let headers = [
        ("Host", "examplebucket.s3.amazonaws.com"),
        ("Range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY_SHA256),
        ("x-amz-date", "20130524T000000Z"),
    ];
    let request =
        SignRequest { method: "GET", path: "/test.txt", query: &[], headers: &headers, payload_sha256: EMPTY_SHA256 };
    let signed = Signer::new(credentials, "us-east-1", "s3").sign(&request).expect("signed");
    assert_eq!(signed.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
    assert_eq!(signed.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

#[test]
fn dates_and_payload_hashes_are_in_sigv4s_forms() {
    assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
    assert_eq!(amz_date(0), "19700101T000000Z");
    assert_eq!(amz_date(951_825_600), "20000229T120000Z", "a leap day");
    assert_eq!(payload_sha256(b""), EMPTY_SHA256);
}
