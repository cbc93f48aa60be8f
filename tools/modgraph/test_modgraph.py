"""The module-graph check on small made-up crates: it finds a circle, and ignores what is not
code (comments, strings, test modules and files)."""

import tempfile
import unittest
from pathlib import Path

import modgraph


def crate(files: dict[str, str]) -> dict[str, set[str]]:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d)
        for name, text in files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(text)
        return modgraph.crate_edges(src, "lib.rs")


class ModGraph(unittest.TestCase):
    def test_a_circle_through_a_reexport_and_super_is_found(self) -> None:
        edges = crate(
            {
                "lib.rs": "mod a; mod b; mod c;\npub use c::Thing;\n",
                "a.rs": "use crate::b::f;\n",
                "b/mod.rs": "mod inner;\n",
                "b/inner.rs": "fn g() -> super::super::Thing { todo!() }\n",
                "c.rs": "pub struct Thing; fn h() { crate::{a::x, b::y}; }\n",
            }
        )
        self.assertEqual(edges, {"a": {"b"}, "b": {"c"}, "c": {"a", "b"}})
        self.assertEqual(modgraph.circles(edges), [["a", "b", "c"]])

    def test_comments_strings_and_tests_are_not_edges(self) -> None:
        edges = crate(
            {
                "lib.rs": "mod a; mod b;\n",
                "a.rs": '// crate::b::x\n/* crate::b /* nested */ crate::b */\nconst S: &str = "crate::b is { not code";\n'
                "#[cfg(test)]\nmod tests { use crate::b::y; }\nfn f() { let c = '\"'; }\n",
                "b.rs": '#[cfg_attr(feature = "schema", schemars(with = "crate::a::T"))]\nstruct U;\n',
                "b_tests.rs": "use crate::a::z;\n",
            }
        )
        self.assertEqual(edges, {"a": set(), "b": {"a"}})
        self.assertEqual(modgraph.circles(edges), [])


if __name__ == "__main__":
    unittest.main()
