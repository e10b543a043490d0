//! How frames are spelled, on real runs: generic methods by their instantiation, in every
//! collector and every view.

use tracelab_fixtures::{prerequisites, require_root};

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

/// Scenario `generics`: one generic method, `Generics.Spin<T>`, burns CPU with bool, int, long,
/// string (shared `__Canon` code) and a struct in an equal split. The perf map names all five
/// `Spin(!!0,float64)`; perf frames take each code range's instantiation from the EventPipe
/// session's MethodDetails, and EventPipe's own frames carry it. Each instantiation's share is
/// judged against the workload's truth in both collectors, and the label is the same in the folded
/// stacks, speedscope, the Firefox profile and pprof of each.
#[test]
fn generic_methods_are_named_by_their_instantiation_in_perf_and_eventpipe() {
    if !prerequisites(
        "names::generic_methods_are_named_by_their_instantiation_in_perf_and_eventpipe",
        &[&require_root, &perf_available],
    ) {
        return;
    }
    let scenario = harness::scenario::Scenario::find("generics").unwrap();
    let (o, _results) = crate::until_decided("generics", || {
        crate::run_scenario(&scenario, harness::run::TargetKind::Host)
    });
    assert_eq!(o.verdict, judge::Verdict::Pass, "{}", crate::describe(&o));
    let labels = [
        "Tracelab.Workloads.Generics::Spin<System.Boolean>(!!0,float64)",
        "Tracelab.Workloads.Generics::Spin<System.Int32>(!!0,float64)",
        "Tracelab.Workloads.Generics::Spin<System.Int64>(!!0,float64)",
        "Tracelab.Workloads.Generics::Spin<System.__Canon>(!!0,float64)",
        "Tracelab.Workloads.Generics::Spin<Tracelab.Workloads.GenericPoint>(!!0,float64)",
    ];
    for collector in ["perf-cpu", "eventpipe"] {
        let folded =
            std::fs::read_to_string(o.dir.join(format!("stacks/{collector}.folded"))).unwrap();
        let (mut named, mut bare) = (0u64, 0u64);
        for line in folded.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            if stack.contains("::Spin<") {
                named += n;
            } else if stack.contains("::Spin(") {
                bare += n;
            }
        }
        for label in labels {
            assert!(
                folded.contains(&format!("{label};")) || folded.contains(&format!("{label} ")),
                "{collector}: no `{label}` in its folded stacks"
            );
        }
        // Every sample of Spin says which instantiation it ran (startup session: nothing was
        // compiled before it).
        assert!(
            bare * 100 <= named,
            "{collector}: {bare} samples of Spin without an instantiation, {named} with one"
        );
        // Every view of the collection shows the same label (the flame graph escapes `<`).
        let gunzip = |bytes: Vec<u8>| {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
                .unwrap();
            out
        };
        for (file, wanted) in [
            (
                format!("{collector}.speedscope.json"),
                "Spin<System.Boolean>(!!0,float64)",
            ),
            (
                format!("{collector}.firefox.json.gz"),
                "Spin<System.Boolean>(!!0,float64)",
            ),
            (
                format!("{collector}.pb.gz"),
                "Spin<System.Boolean>(!!0,float64)",
            ),
            (
                format!("flamegraph-{collector}.svg"),
                "Spin&lt;System.Boolean&gt;(!!0,float64)",
            ),
        ] {
            let bytes = std::fs::read(o.dir.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let bytes = if file.ends_with(".gz") {
                gunzip(bytes)
            } else {
                bytes
            };
            assert!(
                String::from_utf8_lossy(&bytes).contains(wanted),
                "{file}: no `{wanted}`"
            );
        }
    }
    let instantiated = o
        .manifest
        .metrics
        .get("perf-cpu.generic_frames_instantiated")
        .copied()
        .unwrap_or(0.0);
    assert!(
        instantiated > 0.0,
        "perf-cpu: no frame took its instantiation from the EventPipe session"
    );
}

/// Scenario `dynamic-code`: CPU time in code no assembly file holds — a DynamicMethod emitted with
/// Reflection.Emit, a compiled Regex, a compiled expression tree — and interface calls through
/// the runtime's virtual stub dispatch. Each is named as the runtime names it (perf map, EventPipe
/// method events) and its share judged against truth; frames in stubs are class `stub`, labelled
/// by their kind (`stub<VSD_ResolveStub>`) in every view, and the findings count them per kind.
#[test]
fn dynamic_code_and_the_runtimes_stubs_are_named() {
    if !prerequisites("names::dynamic_code_and_the_runtimes_stubs_are_named", &[&require_root, &perf_available]) {
        return;
    }
    let scenario = harness::scenario::Scenario::find("dynamic-code").unwrap();
    let (o, _results) = crate::until_decided("dynamic-code", || crate::run_scenario(&scenario, harness::run::TargetKind::Host));
    assert_eq!(o.verdict, judge::Verdict::Pass, "{}", crate::describe(&o));
    let perf_folded = std::fs::read_to_string(o.dir.join("stacks/perf-cpu.folded")).unwrap();
    let eventpipe_folded = std::fs::read_to_string(o.dir.join("stacks/eventpipe.folded")).unwrap();
    for label in ["dynamicClass::EmitSpin(uint64,int32)", "dynamicClass::Regex1_Scan(", "dynamicClass::lambda_method"] {
        assert!(perf_folded.contains(label), "perf-cpu: no `{label}`");
        assert!(eventpipe_folded.contains(label), "eventpipe: no `{label}`");
    }
    // The stub's label carries no run-specific number and is the same in every view.
    assert!(perf_folded.contains(";stub<VSD_ResolveStub> "), "perf-cpu: no sample ran in the resolve stub");
    assert!(!perf_folded.contains("stub ReportStubBlock"), "a stub keeps the perf map's spelling");
    let gunzip = |bytes: Vec<u8>| {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out).unwrap();
        out
    };
    for file in ["perf-cpu.speedscope.json", "perf-cpu.firefox.json.gz", "perf-cpu.pb.gz", "flamegraph-perf-cpu.svg"] {
        let bytes = std::fs::read(o.dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let bytes = if file.ends_with(".gz") { gunzip(bytes) } else { bytes };
        let wanted = if file.ends_with(".svg") { "stub&lt;VSD_ResolveStub&gt;" } else { "stub<VSD_ResolveStub>" };
        assert!(String::from_utf8_lossy(&bytes).contains(wanted), "{file}: no `{wanted}`");
    }
    let stub = &o.manifest.resolution["perf-cpu"]["classes"]["stub"];
    assert!(stub["leaf_total"].as_u64().unwrap_or(0) > 0 && stub["leaf_ratio"] == 1.0, "{stub}");
    assert!(o.manifest.findings.iter().any(|f| f.contains("runtime stubs") && f.contains("VSD_ResolveStub")), "{:?}", o.manifest.findings);
}

/// The corpus's generic / async app (written without tracelab code: generic classes and methods
/// over several types, async methods, iterators, lambdas), perf and an EventPipe session from its
/// start on one run: every method perf sampled is spelled as EventPipe spells it (see
/// [`perf_and_eventpipe_on_one_run`]).
#[test]
fn perf_and_eventpipe_spell_every_frame_of_a_generic_async_app_alike() {
    if !prerequisites("names::perf_and_eventpipe_spell_every_frame_of_a_generic_async_app_alike", &[&require_root, &perf_available]) {
        return;
    }
    let (_, both, _results) = perf_and_eventpipe_on_one_run("generic-pipeline");
    // The app's own generic code carries its instantiations in both: the async method's state
    // machine per type argument.
    for m in ["Pipeline+<SumAsync>d__1`1[System.Int32]::MoveNext", "Pipeline+<SumAsync>d__1`1[System.Int64]::MoveNext"] {
        assert!(both.iter().any(|b| b.as_str() == m), "no `{m}` in both: {both:?}");
    }
}

/// The corpus's signatures app (parameters of every shape a signature takes: function pointers
/// with their calling conventions, `in` parameters of virtual and interface methods, which carry
/// `modreq(InAttribute)`, a TypedReference, pointers, native ints, arrays of each rank, nested
/// generic types …), perf and EventPipe on one run: each is spelled alike. Its type `Größe` is
/// named outside ASCII, which .NET 10.0.12 writes into its perf map damaged: either perf names it
/// as EventPipe does (a runtime that writes it whole) or the summary says which perf-map lines
/// were lost and why.
#[test]
fn perf_and_eventpipe_spell_every_signature_shape_alike() {
    if !prerequisites("names::perf_and_eventpipe_spell_every_signature_shape_alike", &[&require_root, &perf_available]) {
        return;
    }
    let (o, both, _results) = perf_and_eventpipe_on_one_run("signatures");
    for m in [
        "Corpus.Signatures.Work::Managed",
        "Corpus.Signatures.Work::Unmanaged",
        "Corpus.Signatures.Work::Cdecl",
        "Corpus.Signatures.Derived::Virt",
        "Corpus.Signatures.Derived::Corpus.Signatures.IShape.Area",
        "Corpus.Signatures.Work::Typed",
        "Corpus.Signatures.Work::Arrays",
        "Corpus.Signatures.Work::Pointers",
    ] {
        assert!(both.iter().any(|b| b.as_str() == m), "no `{m}` sampled by both: {both:?}");
    }
    let perf_folded = std::fs::read_to_string(o.dir.join("stacks/perf-cpu.folded")).unwrap();
    let named_in_perf = perf_folded.contains("Corpus.Signatures.Größe::Messen(int32)");
    let damage_said = o.manifest.findings.iter().any(|f| f.contains("non-ASCII") && f.contains(".map"));
    assert!(named_in_perf || damage_said, "`Größe::Messen` is neither named by perf nor its loss explained: {:?}", o.manifest.findings);
}

/// Builds the corpus app `name` from a copy and runs it on the host with perf and an EventPipe
/// session from its start, and checks that every method perf sampled is spelled as EventPipe
/// spells it — parameters, generic instantiations and all. The EventPipe side is every method
/// the session was told of (each method that ran gets a load event: the session exists before
/// the first managed code), not only those it sampled: one collector sampling an overload the
/// other did not (`Emit(OpCode,Type)` beside `Emit(OpCode,MethodInfo)`) is no spelling. Gives the
/// outcome and the `Type::Method`s both sampled.
fn perf_and_eventpipe_on_one_run(name: &str) -> (harness::engine::RunOutcome, Vec<String>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    lab::apps::user_app::build(name, dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let toml = dir.path().join(format!("{name}.toml"));
    std::fs::write(
        &toml,
        format!(
            "name = \"{name}\"\nworkload = {{ dll = \"bin/{name}.dll\" }}\nargs = [\"3\"]\nstop = \"exit\"\nwarmup_s = 0\n\
             target = \"host\"\n\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\n\
             [[collector]]\nkind = \"eventpipe\"\nprofile = \"thread-time\"\nstartup = true\n"
        ),
    )
    .unwrap();
    let scenario = harness::scenario::Scenario::load(&toml).unwrap_or_else(|e| panic!("{e:#}"));
    let (o, results) = crate::until_decided(name, || crate::run_scenario(&scenario, harness::run::TargetKind::Host));
    assert_eq!(o.verdict, judge::Verdict::Pass, "{}", crate::describe(&o));
    // Managed labels by their `Type::Method` part: the spellings each collector gave it.
    let spellings = |collector: &str| {
        let folded = std::fs::read_to_string(o.dir.join(format!("stacks/{collector}.folded"))).unwrap();
        let mut by_method: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
        for line in folded.lines() {
            let stack = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            for frame in stack.split(';').filter(|f| f.contains("::") && f.contains('(') && !f.contains('!') && !f.starts_with('[')) {
                let method = &frame[..frame.find('(').unwrap()];
                by_method.entry(method.to_string()).or_default().insert(frame.to_string());
            }
        }
        by_method
    };
    let (perf, eventpipe) = (spellings("perf-cpu"), spellings("eventpipe"));
    let both: Vec<String> = perf.keys().filter(|m| eventpipe.contains_key(*m)).cloned().collect();
    assert!(both.len() >= 20, "only {} methods sampled by both: {both:?}", both.len());
    // Every method the EventPipe session knows, labelled as its frames are.
    let trace = std::fs::File::open(o.dir.join("artifacts/eventpipe.nettrace")).unwrap();
    let decoded = eventpipe::decode(std::io::BufReader::new(trace), &Default::default()).unwrap();
    let mut known: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for m in decoded.methods.methods() {
        let label = model::method_label(&m.qualified_name()).into_owned();
        if let Some(open) = label.find('(') {
            known.entry(label[..open].to_string()).or_default().insert(label);
        }
    }
    let differing: Vec<String> = perf
        .iter()
        .filter_map(|(m, spellings)| {
            let named = known.get(m)?;
            let unknown: Vec<&String> = spellings.iter().filter(|s| !named.contains(*s)).collect();
            (!unknown.is_empty()).then(|| format!("perf {unknown:?} vs eventpipe {named:?}"))
        })
        .collect();
    let compared = perf.keys().filter(|m| known.contains_key(*m)).count();
    assert!(differing.is_empty(), "{} of {compared} methods spelled differently:\n{}", differing.len(), differing.join("\n"));
    (o, both, results)
}
