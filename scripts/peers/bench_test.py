"""bench.py on the CPU: the data recipe, the float64 reference, the accuracy figures and the filter
headroom. Skipped where torch is not installed (CI has none; Debian's python3-torch runs them)."""
import importlib.util
import unittest

HAVE_TORCH = importlib.util.find_spec("torch") is not None

if HAVE_TORCH:
    import torch

    from peers import bench


def _explicit(data, beta):
    """Loss and gradients from the formulas (mean reduction), in float64."""
    e, c = data.e.double(), data.c.double()
    n, v = e.shape[0], c.shape[0]
    z = e @ c.T
    lse = torch.logsumexp(z, dim=1)
    zt = z[torch.arange(n), data.t]
    loss = (lse - (1 - beta) * zt - beta / v * z.sum(dim=1)).mean()
    y = torch.full_like(z, beta / v)
    y[torch.arange(n), data.t] += 1 - beta
    g = (torch.softmax(z, dim=1) - y) / n
    return loss.item(), g @ c, g.T @ e


class _DropSmoothing(torch.autograd.Function if HAVE_TORCH else object):
    """Exact forward; a backward that leaves out −β/|V| on the vocabulary columns in `cols`."""

    @staticmethod
    def forward(ctx, e, c, t, beta, cols):
        ctx.save_for_backward(e, c, t, cols)
        ctx.beta = beta
        z = e.double() @ c.double().T
        return torch.nn.functional.cross_entropy(z, t, label_smoothing=beta).float()

    @staticmethod
    def backward(ctx, grad):
        e, c, t, cols = ctx.saved_tensors
        n, v = e.shape[0], c.shape[0]
        z = e.double() @ c.double().T
        y = torch.full_like(z, ctx.beta / v)
        y[torch.arange(n), t] += 1 - ctx.beta
        g = (torch.softmax(z, dim=1) - y) / n
        g[:, cols] += ctx.beta / v / n
        g = g * grad.double()
        return (g @ c.double()).to(e.dtype), (g.T @ e.double()).to(c.dtype), None, None, None


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class BenchTest(unittest.TestCase):
    def test_recipe(self):
        d = bench.make_data(16, 40, 8, "f32", 3, device="cpu")
        self.assertTrue(torch.equal(d.c[:16], d.e))
        self.assertEqual(tuple(d.t.shape), (16,))
        self.assertTrue(bool(((d.t >= 0) & (d.t < 40)).all()))
        again = bench.make_data(16, 40, 8, "f32", 3, device="cpu")
        self.assertTrue(torch.equal(again.c, d.c) and torch.equal(again.t, d.t))
        off = bench.make_data(16, 40, 8, "f32", 3, device="cpu", offset=True)
        self.assertTrue(torch.equal(off.e, d.e) and torch.equal(off.t, d.t))
        torch.testing.assert_close(off.c.double() - d.c.double(),
                                   off.offset.expand(40, 8), atol=1e-6, rtol=0)

    def test_reference_matches_the_formulas(self):
        d = bench.make_data(24, 70, 12, "f32", 5, device="cpu")
        for beta in (0.0, 0.3):
            ref = bench.reference(d, beta, torch.bfloat16)
            loss, de, dc = _explicit(d, beta)
            self.assertAlmostEqual(ref.loss, loss, places=10)
            torch.testing.assert_close(ref.de, de, rtol=1e-10, atol=1e-13)
            torch.testing.assert_close(ref.dc, dc, rtol=1e-10, atol=1e-13)

    def test_offset_leaves_the_exact_dE_unchanged(self):
        plain = bench.make_data(32, 300, 16, "f32", 7, device="cpu")
        off = bench.make_data(32, 300, 16, "f32", 7, device="cpu", offset=True)
        a, b = bench.reference(plain, 0.2, torch.float32), bench.reference(off, 0.2, torch.float32)
        self.assertLess(((a.de - b.de).norm() / a.de.norm()).item(), 1e-5)

    def test_accuracy_of_an_exact_row_and_of_one_that_drops_smoothing(self):
        d = bench.make_data(64, 512, 16, "f32", 11, device="cpu", offset=True)
        beta = 0.4
        ref = bench.reference(d, beta, torch.float32)
        none = torch.zeros(0, dtype=torch.long)
        half = torch.randperm(512, generator=torch.Generator().manual_seed(1))[:256]
        exact = bench.accuracy_entry(lambda e, c, t, b: _DropSmoothing.apply(e, c, t, b, none),
                                     d, beta, ref)
        self.assertLess(exact["dE"]["relL2"], 1e-6)
        self.assertLess(exact["dC"]["relL2"], 1e-6)
        self.assertLess(exact["loss"]["relErr"], 1e-6)
        self.assertLess(abs(exact["droppedSmoothing"]), 1e-4)
        self.assertEqual(exact["dE"]["nonFinite"], 0)
        lossy = bench.accuracy_entry(lambda e, c, t, b: _DropSmoothing.apply(e, c, t, b, half),
                                     d, beta, ref)
        self.assertAlmostEqual(lossy["droppedSmoothing"], 0.5, delta=0.08)
        self.assertGreater(lossy["dE"]["relL2"], 1e-3)
        plain = bench.make_data(64, 512, 16, "f32", 11, device="cpu")
        self.assertNotIn("droppedSmoothing",
                         bench.accuracy_entry(lambda e, c, t, b: _DropSmoothing.apply(
                             e, c, t, b, none), plain, beta, bench.reference(plain, beta,
                                                                             torch.float32)))

    def test_tiles_all_against_a_loop(self):
        g = torch.Generator().manual_seed(2)
        small = torch.rand(300, 400, generator=g) < 0.9995
        small[:, 256:] = True
        b = bench.FILTER_TILE
        tiles = [bool(small[i:i + b, j:j + b].all()) for i in range(0, 300, b)
                 for j in range(0, 400, b)]
        self.assertAlmostEqual(bench._tiles_all(small), sum(tiles) / len(tiles), places=12)
        self.assertGreater(sum(tiles), 0)
        self.assertLess(sum(tiles), len(tiles))

    def test_skippable_on_peaked_logits(self):
        n, v = 256, 1024
        z = torch.zeros(n, v, dtype=torch.float64)
        z[torch.arange(n), torch.arange(n)] = 60.0  # each token's own column dominates
        t = torch.arange(n) % 128 + 512  # every target in the vocabulary tile 512..639
        s = bench.skippable(z, t, 0.1, 2.0**-12)
        # below eps: all but each row's own column and its target
        self.assertAlmostEqual(s["entriesBelowEps"], 1 - 2 / v, places=9)
        # each block of 128 rows keeps its own diagonal tile and the targets' tile: 2 of 8
        self.assertEqual(s["tilesSkippableUnsorted"], 0.75)
        # a target scattered over the vocabulary keeps its tile in every row block
        s = bench.skippable(z, (torch.arange(n) * 7 + 300) % v, 0.1, 2.0**-12)
        self.assertEqual(s["tilesSkippableUnsorted"], 0.0)


if __name__ == "__main__":
    unittest.main()
