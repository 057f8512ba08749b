//! The Helm chart without a cluster: `helm lint` is clean, its CRDs are `crds/`, the plain
//! manifests in `deploy/` are up to date, and docs/install.md lists exactly the rules of the
//! operator's ClusterRole and of the roles for holders and users, and the alerts are valid PromQL.
//! (Installing, upgrading and validating against the API server: `e2e/install.rs`.)

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The harness's helm (built once, cached by e2e/harness/build.sh).
fn helm() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new("bash").arg(repo().join("e2e/harness/build.sh")).output().expect("run build.sh");
        assert!(out.status.success(), "e2e/harness/build.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("helm")
    })
    .clone()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.current_dir(repo()).output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn helm_lint_is_clean() {
    let out = run(Command::new(helm()).args(["lint", "--strict", "charts/leasehold"]));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    assert!(!out.contains("[WARNING]") && !out.contains("[ERROR]"), "{out}");
}

#[test]
fn the_charts_crds_are_the_committed_crds() {
    let names = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names("charts/leasehold/crds"),
        names("crds"),
        "same files (copy crds/*.yaml into charts/leasehold/crds/)"
    );
    for name in names("crds") {
        let a = std::fs::read_to_string(repo().join("crds").join(&name)).unwrap();
        let b = std::fs::read_to_string(repo().join("charts/leasehold/crds").join(&name)).unwrap();
        assert!(a == b, "charts/leasehold/crds/{name} differs from crds/{name}: run `make crd`");
    }
}

#[test]
fn plain_manifests_are_up_to_date() {
    let rendered = run(Command::new("bash").arg("deploy/render.sh").env("HELM", helm()));
    let committed = std::fs::read_to_string(repo().join("deploy/leasehold.yaml")).unwrap();
    assert!(rendered == committed, "deploy/leasehold.yaml is stale: run `make manifests`");
}

/// [ClusterRole, API group, resource, "verb, verb"] of every rule of the ClusterRoles in
/// `template`, rendered for the release `leasehold` (the names docs/install.md uses), one entry per
/// group and resource. No wildcards, Secrets, `escalate`, `bind` or `impersonate`.
fn cluster_role_rules(template: &str) -> BTreeSet<Vec<String>> {
    let out = run(Command::new(helm()).args(["template", "leasehold", "charts/leasehold", "-s", template]));
    let mut rules = BTreeSet::new();
    for role in serde_saphyr::from_multiple::<serde_json::Value>(&out).expect("ClusterRole YAML") {
        if role.is_null() {
            continue;
        }
        assert_eq!(role["kind"].as_str(), Some("ClusterRole"), "{template}: {role:?}");
        let name = role["metadata"]["name"].as_str().expect("name").to_string();
        for rule in role["rules"].as_array().expect("rules") {
            let list = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .unwrap_or_else(|| panic!("{key} in {rule:?}"))
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let verbs = list("verbs");
            for v in &verbs {
                assert!(v != "*" && !["escalate", "bind", "impersonate"].contains(&v.as_str()), "verb {v} granted");
            }
            for group in list("apiGroups") {
                for resource in list("resources") {
                    assert!(group != "*" && resource != "*" && resource != "secrets", "{group}/{resource} granted");
                    rules.insert(vec![name.clone(), group.clone(), resource, verbs.join(", ")]);
                }
            }
        }
    }
    rules
}

/// The rows of the table between `<!-- {marker}: begin -->` and `<!-- {marker}: end -->` in
/// docs/install.md, each as its first `columns` cells without the backquotes.
fn documented_rules(marker: &str, columns: usize) -> BTreeSet<Vec<String>> {
    let doc = std::fs::read_to_string(repo().join("docs/install.md")).unwrap();
    let table = doc
        .split(&format!("<!-- {marker}: begin -->"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {marker} table in docs/install.md"))
        .split(&format!("<!-- {marker}: end -->"))
        .next()
        .unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").map(|c| c.trim_matches(|ch| ch == '|' || ch == ' ')).collect();
            cells[..columns].iter().map(|c| c.trim_matches('`').trim_matches('"').to_string()).collect()
        })
        .collect()
}

#[track_caller]
fn assert_same(table: &str, granted: BTreeSet<Vec<String>>, documented: BTreeSet<Vec<String>>) {
    assert!(!granted.is_empty());
    let missing: Vec<_> = granted.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&granted).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/install.md {table} table: missing {missing:?}, not granted {stale:?}"
    );
}

/// Without the ClusterRole's name: the operator's and the holder's tables have one role each.
fn without_role(rules: BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    rules.into_iter().map(|r| r[1..].to_vec()).collect()
}

#[test]
fn docs_list_exactly_the_cluster_role_rules() {
    let granted = without_role(cluster_role_rules("templates/clusterrole.yaml"));
    assert_same("rbac-rules", granted, documented_rules("rbac-rules", 3));
}

/// The roles for holders and users (docs/install.md, "RBAC: holders and users"): documented
/// rule by rule, and none of them writes (or reads) a status subresource, which is the operator's.
#[test]
fn docs_list_exactly_the_holder_and_aggregated_role_rules() {
    let holder = cluster_role_rules("templates/holder-clusterrole.yaml");
    let aggregated = cluster_role_rules("templates/aggregated-clusterroles.yaml");
    for rule in holder.iter().chain(&aggregated) {
        assert!(!rule[2].contains('/'), "{} grants a subresource: {rule:?}", rule[0]);
    }
    assert_eq!(holder.iter().map(|r| r[0].as_str()).collect::<BTreeSet<_>>(), BTreeSet::from(["leasehold-holder"]));
    assert_same("holder-rules", without_role(holder), documented_rules("holder-rules", 3));
    assert_same("aggregated-rules", aggregated, documented_rules("aggregated-rules", 4));
}

/// `rbac.holderRole` and `rbac.aggregateRoles` (default on) each leave out their roles.
#[test]
fn the_holder_and_aggregated_roles_can_be_turned_off() {
    let cluster_roles = |extra: &[&str]| -> BTreeSet<String> {
        let mut args = vec!["template", "leasehold", "charts/leasehold"];
        args.extend(extra);
        let out = run(Command::new(helm()).args(&args));
        serde_saphyr::from_multiple::<serde_json::Value>(&out)
            .unwrap()
            .into_iter()
            .filter(|v| v["kind"].as_str() == Some("ClusterRole"))
            .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let all = ["leasehold", "leasehold-edit", "leasehold-holder", "leasehold-view"].map(String::from);
    assert_eq!(cluster_roles(&[]), BTreeSet::from(all.clone()));
    let no_holder = cluster_roles(&["--set", "rbac.holderRole=false"]);
    assert_eq!(no_holder, BTreeSet::from(["leasehold", "leasehold-edit", "leasehold-view"].map(String::from)));
    let no_aggregated = cluster_roles(&["--set", "rbac.aggregateRoles=false"]);
    assert_eq!(no_aggregated, BTreeSet::from(["leasehold", "leasehold-holder"].map(String::from)));
}

/// The claim injection needs MutatingAdmissionPolicy v1 (Kubernetes 1.36): on an older cluster the
/// chart refuses with a message that says how to install without it, and renders without it.
#[test]
fn claim_injection_refuses_clusters_older_than_1_36_and_can_be_turned_off() {
    let render = |extra: &[&str]| {
        let mut args = vec!["template", "t", "charts/leasehold", "--kube-version", "1.35.0"];
        args.extend(extra);
        Command::new(helm()).args(&args).current_dir(repo()).output().expect("run helm")
    };
    let refused = render(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "rendered for 1.35");
    assert!(
        err.contains("claimInjection needs Kubernetes 1.36") && err.contains("claimInjection.enabled=false"),
        "{err}"
    );
    let off = render(&["--set", "claimInjection.enabled=false"]);
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let yaml = String::from_utf8_lossy(&off.stdout);
    assert!(!yaml.contains("MutatingAdmissionPolicy") && yaml.contains("ValidatingAdmissionPolicy"));
    let on = run(Command::new(helm()).args(["template", "t", "charts/leasehold"]));
    assert_eq!(on.matches("kind: MutatingAdmissionPolicy\n").count(), 3, "workload, cronjob and pod policies");
}

/// The admission policy refuses exactly the `leasehold.dev/max-wait` values the operator's
/// parser refuses (`lock::policy::parse_max_wait`, humantime), on a table of values: the pattern
/// in the chart (RE2, `_helpers.tpl`) and a non-zero digit, as the policy evaluates them.
#[test]
fn max_wait_admission_pattern_matches_the_operators_parser() {
    let helpers = std::fs::read_to_string(repo().join("charts/leasehold/templates/_helpers.tpl")).unwrap();
    let define = helpers.split(r#"{{- define "leasehold.maxWaitPattern" -}}"#).nth(1).expect("define");
    let pattern = define.split("{{- end -}}").next().unwrap().trim();
    let re = regex::Regex::new(pattern).expect("the pattern compiles");
    let nonzero = regex::Regex::new("[1-9]").unwrap();
    let values = [
        "90s",
        "10m",
        "1h30m",
        "1h 30m",
        " 5m ",
        "2 hours",
        "1.5h",
        "300ms",
        "1d",
        "2weeks",
        "3M",
        "1y",
        "10 min",
        "",
        " ",
        "0s",
        "00m",
        "banana",
        "10",
        "-5m",
        "5 m 3",
        "1h30",
        "10S",
        "5 parsecs",
        "1,5h",
        "m",
        "1e3s",
        "0.0s",
        "5sec",
        "5secs",
        "µs",
        "7µs",
    ];
    for v in values {
        let admitted = re.is_match(v) && nonzero.is_match(v);
        let parsed = leasehold::lock::policy::parse_max_wait(Some(v)).is_ok();
        assert_eq!(admitted, parsed, "max-wait {v:?}: admission {admitted}, operator {parsed}");
    }
}

/// Every alert expression of the chart's PrometheusRule is valid PromQL (the `promql-parser`
/// crate, GreptimeDB's port of the Prometheus parser): the PrometheusRule CRD's schema takes any
/// string, and Prometheus would only refuse a broken rule once installed. Each alert also names
/// a `leasehold_` metric (the e2e test `every_metric_the_alerts_and_the_dashboard_name_is_exported`
/// checks that the operator exports them).
#[test]
fn every_alert_expression_is_valid_promql() {
    assert!(
        promql_parser::parser::parse("time() - leasehold_lock_held_since_seconds >").is_err(),
        "the check can fail"
    );
    let out = run(Command::new(helm()).args([
        "template",
        "lh",
        "charts/leasehold",
        "--show-only",
        "templates/prometheusrule.yaml",
        "--set",
        "monitoring.prometheusRule.enabled=true",
    ]));
    let rule: serde_json::Value = serde_saphyr::from_str(&out).expect("PrometheusRule YAML");
    let rules: Vec<&serde_json::Value> =
        rule["spec"]["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    assert!(rules.len() >= 5, "{out}");
    for r in rules {
        let (alert, expr) = (r["alert"].as_str().unwrap(), r["expr"].as_str().unwrap());
        if let Err(e) = promql_parser::parser::parse(expr) {
            panic!("alert {alert}: expr {expr:?} is not valid PromQL: {e}");
        }
        assert!(expr.contains("leasehold_"), "alert {alert} names a leasehold metric: {expr}");
    }
}

/// `rbac.scope: Namespace`: the operator's rules are a Role in the served namespace, the same
/// rules as the cluster-wide ClusterRole but the two cluster-scoped reads, which a ClusterRole of
/// their own grants (nodes, and only the served namespace object); the operator is started with
/// `--namespace`, and every admission policy binding is limited to that namespace.
#[test]
fn namespace_scope_grants_a_role_in_the_served_namespace_and_two_cluster_reads() {
    let args = ["-n", "team", "--set", "rbac.scope=Namespace", "--set", "rbac.namespace=apps"];
    let mut cmd = Command::new(helm());
    cmd.args(["template", "leasehold", "charts/leasehold"]).args(args);
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&run(&mut cmd)).unwrap();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let rules = |o: &serde_json::Value| -> BTreeSet<String> {
        o["rules"].as_array().unwrap().iter().map(|r| serde_json::to_string(r).unwrap()).collect()
    };
    let cluster_wide = without_role(cluster_role_rules("templates/clusterrole.yaml"));
    let role = find("Role", "leasehold");
    assert_eq!(role["metadata"]["namespace"].as_str(), Some("apps"));
    let role_resources: BTreeSet<String> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()))
        .collect();
    let expected: BTreeSet<String> =
        cluster_wide.iter().map(|r| r[1].clone()).filter(|r| r != "nodes" && r != "namespaces").collect();
    assert_eq!(role_resources, expected, "the Role has the ClusterRole's namespaced rules");
    let reads = find("ClusterRole", "leasehold-cluster-reads");
    assert_eq!(
        rules(reads),
        BTreeSet::from([
            r#"{"apiGroups":[""],"resourceNames":["apps"],"resources":["namespaces"],"verbs":["list","watch"]}"#.into(),
            r#"{"apiGroups":[""],"resources":["nodes"],"verbs":["list","watch"]}"#.into(),
        ])
    );
    assert!(!objects.iter().any(|o| o["metadata"]["name"].as_str() == Some("leasehold") && o["kind"] == "ClusterRole"));
    let binding = find("RoleBinding", "leasehold");
    assert_eq!(
        (binding["metadata"]["namespace"].as_str(), binding["roleRef"]["kind"].as_str()),
        (Some("apps"), Some("Role"))
    );
    assert_eq!(binding["subjects"][0]["namespace"].as_str(), Some("team"));
    find("ClusterRoleBinding", "leasehold-cluster-reads");
    let deployment = find("Deployment", "leasehold");
    let container_args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(container_args.as_array().unwrap().iter().any(|a| a == "--namespace=apps"), "{container_args}");
    let bindings: Vec<_> =
        objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("AdmissionPolicyBinding"))).collect();
    assert!(bindings.len() >= 4, "{} policy bindings", bindings.len());
    for b in bindings {
        let selector = &b["spec"]["matchResources"]["namespaceSelector"]["matchLabels"];
        assert_eq!(selector["kubernetes.io/metadata.name"].as_str(), Some("apps"), "{}", b["metadata"]["name"]);
    }
}

/// The chart README's Values table and values.yaml agree: every value (a key whose value is not a
/// map, or a map the table names as a whole, like `resources`) is in the table itself or under a
/// key the table names, and every name in the table is a key of values.yaml. In the table,
/// `` `a.b` / `.c` `` is `a.b` and `a.c`.
#[test]
fn the_values_table_documents_every_value_and_only_values() {
    let doc = std::fs::read_to_string(repo().join("charts/leasehold/README.md")).unwrap();
    let table = doc.split("## Values").nth(1).unwrap().split("\n## ").next().unwrap();
    let mut documented = BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split(" | ").next().unwrap().trim_start_matches("| ");
        let mut parent = String::new();
        for item in first.split(" / ") {
            let name = item.trim().trim_matches('`');
            if let Some(rel) = name.strip_prefix('.') {
                documented.insert(format!("{parent}{rel}"));
            } else {
                parent = name.rsplit_once('.').map(|(p, _)| format!("{p}.")).unwrap_or_default();
                documented.insert(name.to_string());
            }
        }
    }
    let values: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join("charts/leasehold/values.yaml")).unwrap()).unwrap();
    fn keys(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, bool)>) {
        if let Some(map) = v.as_object() {
            for (k, child) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                let is_map = child.as_object().is_some_and(|m| !m.is_empty());
                out.push((path.clone(), is_map));
                keys(&path, child, out);
            }
        }
    }
    let mut all = vec![];
    keys("", &values, &mut all);
    let paths: BTreeSet<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
    let stale: Vec<_> = documented.iter().filter(|d| !paths.contains(d.as_str())).collect();
    assert!(stale.is_empty(), "the chart README names values that values.yaml does not have: {stale:?}");
    let covered = |p: &str| {
        documented.contains(p)
            || documented.iter().any(|d| p.strip_prefix(d.as_str()).is_some_and(|rest| rest.starts_with('.')))
    };
    let missing: Vec<_> = all.iter().filter(|(p, is_map)| !is_map && !covered(p)).map(|(p, _)| p).collect();
    assert!(missing.is_empty(), "values.yaml has values the chart README's table does not document: {missing:?}");
}
