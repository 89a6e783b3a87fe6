"""Finding each package in a folder, its version and commit, and naming systems."""
import os
import tempfile
import unittest

from peers import stubs
from peers.systems import (
    PACKAGES, SYSTEMS, InputError, Located, arithmetic, locate, parse_systems, torch_cells)


class Locate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dirs = stubs.make_packages(os.path.join(self.tmp.name, "peers"))

    def tearDown(self):
        self.tmp.cleanup()

    def test_each_package_from_its_folder_with_version_and_commit(self):
        got = locate(PACKAGES["paper-cce"], self.dirs["paper-cce"])
        self.assertEqual(got, Located(self.dirs["paper-cce"], "cut-cross-entropy 24.12.1, commit "
                                      f"5d9cdad (from {self.dirs['paper-cce']})"))
        self.assertIn("25.6.4, commit d42911f",
                      locate(PACKAGES["apple-cce"], self.dirs["apple-cce"]).version)
        self.assertIn("liger-kernel 0.8.2, commit ead96b6",
                      locate(PACKAGES["liger-kernel"], self.dirs["liger-kernel"]).version)

    def test_the_package_folder_itself_and_a_src_layout(self):
        inner = os.path.join(self.dirs["paper-cce"], "cut_cross_entropy")
        self.assertEqual(locate(PACKAGES["paper-cce"], inner).path, self.dirs["paper-cce"])
        repo = os.path.join(self.tmp.name, "Liger-Kernel")
        os.makedirs(os.path.join(repo, "src"))
        os.rename(os.path.join(self.dirs["liger-kernel"], "liger_kernel"),
                  os.path.join(repo, "src", "liger_kernel"))
        with open(os.path.join(repo, "pyproject.toml"), "w") as f:
            f.write('[project]\nversion = "0.9.0"\n')
        os.makedirs(os.path.join(repo, ".git", "refs", "heads"))
        with open(os.path.join(repo, ".git", "HEAD"), "w") as f:
            f.write("ref: refs/heads/main\n")
        with open(os.path.join(repo, ".git", "refs", "heads", "main"), "w") as f:
            f.write("0123456789abcdef0123456789abcdef01234567\n")
        got = locate(PACKAGES["liger-kernel"], repo)
        self.assertEqual(got.path, os.path.join(repo, "src"))
        self.assertEqual(got.version, f"liger-kernel 0.9.0, commit 0123456789ab (from {repo})")

    def test_folders_that_hold_no_such_package(self):
        with self.assertRaisesRegex(InputError, "no label smoothing"):
            locate(PACKAGES["paper-cce"], self.dirs["apple-cce"])
        with self.assertRaisesRegex(InputError, "the paper's fork"):
            locate(PACKAGES["apple-cce"], self.dirs["paper-cce"])
        with self.assertRaisesRegex(InputError, "^--liger .*: holds no liger_kernel package"):
            locate(PACKAGES["liger-kernel"], self.dirs["paper-cce"])
        os.remove(os.path.join(self.dirs["liger-kernel"], "liger_kernel", "ops",
                               "fused_linear_cross_entropy.py"))
        with self.assertRaisesRegex(InputError, "has no ops/fused_linear_cross_entropy.py"):
            locate(PACKAGES["liger-kernel"], self.dirs["liger-kernel"])


class Names(unittest.TestCase):
    def test_parse_systems(self):
        self.assertEqual(parse_systems("none", False), [])
        self.assertEqual([s.name for s in parse_systems("liger, cce,cce", True)],
                         ["paper-filter", "cce", "liger"])
        self.assertEqual(len(parse_systems("paper-filter", True)), 1)
        with self.assertRaisesRegex(InputError, "unknown system 'ours'"):
            parse_systems("ours", False)

    def test_arithmetic_and_torch_cells(self):
        self.assertEqual(arithmetic(SYSTEMS["paper-fused"], "bf16"), "bf16 tensor cores (Triton)")
        self.assertEqual(arithmetic(SYSTEMS["liger"], "f16"),
                         "f16 tensor cores (cuBLAS matmuls, Triton softmax)")
        cells = torch_cells(["baseline", "matmul"], ["bf16", "fp32"], ["matmul"], [0.1, 0.0],
                            "bf16")
        self.assertEqual([(c.method, c.beta, c.mode) for c in cells],
                         [("torch-baseline", b, m) for b in (0.1, 0.0)
                          for m in ("fwd", "bwd", "fwd+bwd")] +
                         [("torch-matmul", 0.1, "fwd"), ("torch-matmul-fp32", 0.1, "fwd")])
        self.assertEqual(cells[-1].arithmetic, "fp32 FMA (TF32 off)")
        self.assertEqual(cells[0].label, "PyTorch baseline (cross_entropy on logits.float())")


if __name__ == "__main__":
    unittest.main()
