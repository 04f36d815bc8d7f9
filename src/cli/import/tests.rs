use secrecy::ExposeSecret;

use super::*;

const ISSUER: &str = "https://id.example.com";

fn rules() -> Rules {
    let client = |providers: &[&str], members: &[&str]| ClientRule {
        providers: providers.iter().map(|p| p.to_string()).collect(),
        members: members.iter().map(|m| m.to_string()).collect(),
    };
    Rules {
        issuer: ISSUER.into(),
        providers: ["github", "google"].map(String::from).into(),
        clients: [
            ("a".to_owned(), client(&["github"], &["a"])),
            ("b".to_owned(), client(&["github", "google"], &["b", "c"])),
            ("c".to_owned(), client(&["google"], &["b", "c"])),
        ]
        .into(),
    }
}

fn read(text: &str) -> (Vec<Grant>, Vec<String>) {
    let (grants, problems) = read_grants(text.as_bytes(), &rules()).unwrap();
    (grants, problems.iter().map(ToString::to_string).collect())
}

const OK: &str = r#"{"subject":"alice","provider":"github","access_token":"gho_secret1","scopes":"repo read:user","clients":["a"]}"#;

#[test]
fn a_minimal_line_takes_the_defaults() {
    let (grants, problems) = read(OK);
    assert_eq!(problems, Vec::<String>::new());
    let g = &grants[0];
    assert_eq!(
        (g.line, g.issuer.as_str(), g.subject.as_str()),
        (1, ISSUER, "alice")
    );
    assert_eq!((g.account_id.as_str(), &g.account_label), ("", &None));
    assert_eq!(g.access_token.expose_secret(), "gho_secret1");
    assert!(g.refresh_token.is_none() && g.expires_at.is_none());
    assert_eq!(g.token_type, "Bearer");
    assert_eq!(g.scopes, ["repo", "read:user"]);
    assert_eq!(g.clients, ["a"]);
}

#[test]
fn every_field_is_read_and_a_grant_group_shares_the_grant() {
    let line = format!(
        r#"{{"issuer":"{ISSUER}","subject":"bob","provider":"google","account":{{"id":"108","label":"bob@example.com"}},"access_token":"ya29.x","refresh_token":"1//r","token_type":"bearer","expires_at":"2030-01-01T00:00:00+01:00","scopes":["openid","email","openid"],"clients":["c"]}}"#
    );
    let (grants, problems) = read(&format!("\n\n{line}\n"));
    assert!(problems.is_empty(), "{problems:?}");
    let g = &grants[0];
    assert_eq!(g.line, 3, "blank lines count");
    assert_eq!(
        (g.account_id.as_str(), g.account_label.as_deref()),
        ("108", Some("bob@example.com"))
    );
    assert_eq!(
        g.refresh_token.as_ref().map(|r| r.expose_secret()),
        Some("1//r")
    );
    assert_eq!(g.expires_at, Some(1_893_452_400));
    assert_eq!(g.scopes, ["openid", "email"]);
    assert_eq!(g.clients, ["b", "c"]);
    let (grants, _) = read(
        r#"{"subject":"bob","provider":"github","access_token":"t","expires_at":1893456000,"scopes":[],"clients":["a"]}"#,
    );
    assert_eq!(grants[0].expires_at, Some(1_893_456_000));
    assert!(grants[0].scopes.is_empty());
    // As Nango writes it: milliseconds after the point, a null refresh token.
    let (grants, _) = read(
        r#"{"subject":"bob","provider":"github","access_token":"t","refresh_token":null,"expires_at":"2030-01-01T00:00:00.000Z","scopes":"","clients":["a"]}"#,
    );
    assert_eq!(grants[0].expires_at, Some(1_893_456_000));
    assert!(grants[0].refresh_token.is_none());
}

#[test]
fn each_problem_names_its_line_and_field_and_never_a_token() {
    let text = [
        OK,
        r#"{"subject":"","provider":"gitlab","access_token":"SECRET-A","scopes":[],"clients":["zz"]}"#,
        r#"{"provider":"github","access_token":7,"refresh_token":"","scopes":"x","clients":["c"],"expires_at":"tomorrow"}"#,
        r#"{"subject":"x","provider":"github","access_token":"SECRET-B","scopes":[],"clients":["a"],"expires_at":1893456000000,"extra":"SECRET-C"}"#,
        r#""SECRET-D""#,
        r#"{"subject":"x","access_token":"SECRET-E""#,
        r#"{"subject":"x","subject":"y","provider":"github","access_token":"SECRET-F","scopes":[],"clients":["a"],"issuer":"https://other"}"#,
        r#"{"subject":"x","provider":"github","account":{"id":""},"access_token":"SECRET-G","scopes":[""],"clients":[]}"#,
    ]
    .join("\n");
    let (grants, problems) = read(&text);
    assert_eq!(grants.len(), 1);
    let all = problems.join("\n");
    for secret in ["SECRET", "tomorrow", "gho_secret1"] {
        assert!(!all.contains(secret), "{all}");
    }
    for expected in [
        "line 2: subject must be 1 to 255 characters",
        "line 2: provider \"gitlab\" is not configured (configured: github, google)",
        "line 2: client \"zz\" is not configured",
        "line 3: subject is required",
        "line 3: access_token must be a string",
        "line 3: refresh_token is empty",
        "line 3: client \"c\" may not use provider \"github\"",
        "line 3: expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds",
        "line 4: unknown field \"extra\"",
        "line 4: expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds; this looks like milliseconds",
        "line 5: is not a JSON object",
        "line 6: is not valid JSON: EOF while parsing an object (column 40)",
        "line 7: subject is given twice",
        "line 7: issuer is not this service's identity issuer (https://id.example.com)",
        "line 8: account.id must be a string of 1 to 255 characters",
        "line 8: scopes must each be 1 to 200 characters",
        "line 8: clients is empty",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in\n{all}");
    }
    assert_eq!(problems.len(), 17, "{all}");
}

#[test]
fn a_duplicate_names_both_lines_and_another_account_is_no_duplicate() {
    let with = |id: &str| {
        OK.replace(
            r#""scopes""#,
            &format!(r#""account":{{"id":"{id}"}},"scopes""#),
        )
    };
    let text = [OK, &with("1"), &with("2"), OK, &with("1")].join("\n");
    let (grants, problems) = read(&text);
    assert_eq!(grants.len(), 3);
    assert_eq!(
        problems,
        [
            "line 4: duplicates line 1 (the same subject, provider and account)",
            "line 5: duplicates line 2 (the same subject, provider and account)",
        ]
    );
}

#[test]
fn a_line_too_long_or_not_utf8_is_a_problem_and_reading_goes_on() {
    let long = format!("{{\"subject\":\"{}\"}}", "x".repeat(MAX_LINE_BYTES));
    let mut text = format!("{long}\n").into_bytes();
    text.extend_from_slice(b"\xff\xfe\n");
    text.extend_from_slice(OK.as_bytes());
    let (grants, problems) = read_grants(&text[..], &rules()).unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].line, 3);
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        problems,
        [
            format!("line 1: is longer than {MAX_LINE_BYTES} bytes"),
            "line 2: is not UTF-8".to_owned(),
        ]
    );
}

fn held(subject: &str, provider: &str, id: &str, label: Option<&str>) -> HeldAccount {
    HeldAccount {
        subject: subject.into(),
        provider: provider.into(),
        account_id: id.into(),
        account_label: label.map(Into::into),
    }
}

fn grants(lines: &[(&str, &str)]) -> Vec<Grant> {
    let text: Vec<String> = lines
        .iter()
        .map(|(subject, account)| {
            OK.replace("alice", subject)
                .replace(r#""scopes""#, &format!(r#""account":{account},"scopes""#))
        })
        .collect();
    let (grants, problems) = read(&text.join("\n"));
    assert!(problems.is_empty(), "{problems:?}");
    grants
}

#[test]
fn a_stored_account_is_left_as_it_is_and_new_ones_count_against_the_limit() {
    let g = grants(&[
        ("alice", r#"{"id":"1"}"#),
        ("alice", r#"{"id":"2"}"#),
        ("alice", r#"{"id":"3"}"#),
        ("bob", r#"{"id":"9","label":"bob"}"#),
        ("carol", r#"{"id":"7","label":"c2"}"#),
    ]);
    let stored = [
        held("alice", "github", "1", None),
        held("alice", "google", "5", None),
        // Stored before accounts had ids: taken as the account unless its label differs.
        held("bob", "github", "", None),
        held("carol", "github", "", Some("c1")),
    ];
    let (fates, problems) = plan(&g, &stored, 2, true);
    use Fate::*;
    assert_eq!(fates, [Present, Import, Import, Present, Import]);
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "line 3: subject \"alice\" would hold 3 accounts at \"github\", more than max_accounts_per_provider (2); 1 of them stored already (revoked ones count)"
        ]
    );
    let (_, problems) = plan(&g, &stored, 5, false);
    let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, [2, 3, 5], "{problems:?}");
    assert!(problems[0].message.contains("migrate --post-deploy"));
}
