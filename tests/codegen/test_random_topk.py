"""rng-bit-generator (Philox, ThreeFry; narrow, 32- and 64-bit outputs) bit-exact with the evaluator,
and XLA:CPU's custom-call TopK."""
import numpy as np
import pytest

from tests.codegen.cg_helpers import check, parsed, random_array

RBG = """HloModule rbg
ENTRY %main (s: u64[STATE]) -> (u64[STATE], TYPE[DIMS]) {
  %s = u64[STATE]{0} parameter(0)
  ROOT %r = (u64[STATE]{0}, TYPE[DIMS]) rng-bit-generator(%s), algorithm=ALG
}
"""


@pytest.mark.parametrize("alg", ["rng_philox", "rng_default", "rng_three_fry"])
@pytest.mark.parametrize("type_,dims", [("u32", "5,7"), ("u64", "3,3"), ("u8", "9"), ("u32", ""), ("u16", "3,5"),
                                        ("u32", "7,3")])
@pytest.mark.parametrize("state", [2, 3])
def test_rng_bit_generator_bit_exact(alg, type_, dims, state):
    if alg == "rng_three_fry" and state == 3:
        pytest.skip("ThreeFry uses a 2-word state")
    text = RBG.replace("STATE", str(state)).replace("TYPE", type_).replace("DIMS", dims).replace("ALG", alg)
    layout = "" if not dims else "{" + ",".join(str(i) for i in reversed(range(dims.count(",") + 1))) + "}"
    text = text.replace(f"{type_}[{dims}])", f"{type_}[{dims}]{layout})")
    s = np.array([0x1234_5678_9ABC_DEF0, 0xFFFF_FFFF_FFFF_FFF0, 7][:state], np.uint64)
    check(parsed(text), s)


TOPK = """HloModule topk
%gt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=GT, type=TOTALORDER
}
ENTRY %main (x: f32[3,10]) -> (f32[3,4], s32[3,4]) {
  %x = f32[3,10]{1,0} parameter(0)
  ROOT %t = (f32[3,4]{1,0}, s32[3,4]{1,0}) custom-call(%x), custom_call_target="TopK", called_computations={%gt}
}
"""


def test_topk_custom_call():
    x = random_array((3, 10), np.float32, np.random.default_rng(2), specials=False)
    x[1, :4] = 5.0  # ties keep index order
    _, got = check(parsed(TOPK), x)
    assert list(got[1][1]) == [0, 1, 2, 3]
