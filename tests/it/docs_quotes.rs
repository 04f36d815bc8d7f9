//! Code the docs quote stays true: a fenced block under `<!-- quoted from PATH -->` in any
//! `docs/*.md` or the README must consist of lines of that file, each verbatim (blank lines
//! aside; a quote may skip lines between them).

use std::path::Path;

const MARK: &str = "<!-- quoted from ";

/// Every quoted block: (the doc, its line number, the quoted file, the block's lines).
fn quoted_blocks(root: &Path) -> Vec<(String, usize, String, Vec<String>)> {
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root.join("README.md"));
    docs.sort();
    let mut blocks = Vec::new();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root).unwrap().display().to_string();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim().strip_prefix(MARK) else {
                continue;
            };
            let file = rest
                .strip_suffix("-->")
                .unwrap_or_else(|| panic!("{name}:{}: an unclosed marker", i + 1))
                .trim()
                .to_owned();
            assert!(
                lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
                "{name}:{}: the marker must stand right above a code fence",
                i + 1
            );
            let body: Vec<String> = lines[i + 2..]
                .iter()
                .take_while(|l| !l.starts_with("```"))
                .map(|l| l.to_string())
                .collect();
            blocks.push((name.clone(), i + 1, file, body));
        }
    }
    blocks
}

#[test]
fn quoted_code_in_the_docs_is_verbatim_from_its_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let blocks = quoted_blocks(root);
    for must in ["examples/python/client.py", "examples/typescript/client.ts"] {
        assert!(
            blocks
                .iter()
                .any(|(doc, _, f, _)| f == must && doc == "docs/mcp-integration.md"),
            "docs/mcp-integration.md quotes {must}"
        );
    }
    for (doc, at, file, body) in blocks {
        let source = std::fs::read_to_string(root.join(&file))
            .unwrap_or_else(|e| panic!("{doc}:{at}: quotes {file}: {e}"));
        let source: Vec<&str> = source.lines().map(str::trim_end).collect();
        let quoted: Vec<&str> = body
            .iter()
            .map(|l| l.trim_end())
            .filter(|l| !l.is_empty())
            .collect();
        assert!(!quoted.is_empty(), "{doc}:{at}: an empty quote of {file}");
        for line in quoted {
            assert!(
                source.contains(&line),
                "{doc}:{at}: this line is not in {file} (update the quote):\n{line}"
            );
        }
    }
}
