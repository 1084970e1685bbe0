"""When duo starts again with huge pages, and what its peers get (duo.llama.hugepages)."""

from __future__ import annotations

from duo.llama.hugepages import TUNABLE, user_environment, wanted, with_tunable

MADVISE = "always [madvise] never\n"
GLIBC = "glibc 2.36"


def test_a_command_that_loads_a_model_starts_again_where_pages_are_given_on_request() -> None:
    for argv in (["lead", "-m", "x.gguf"], ["-v", "generate", "-p", "hi"], ["bench"]):
        assert wanted(argv, {}, MADVISE, GLIBC), argv


def test_commands_that_load_no_model_do_not_start_again() -> None:
    for argv in (["models"], ["chat"], ["completion", "bash"], ["--version"], []):
        assert not wanted(argv, {}, MADVISE, GLIBC), argv


def test_nothing_to_ask_for_where_the_kernel_gives_all_or_none_or_glibc_cannot_ask() -> None:
    assert not wanted(["lead"], {}, "[always] madvise never\n", GLIBC)
    assert not wanted(["lead"], {}, "always madvise [never]\n", GLIBC)
    assert not wanted(["lead"], {}, "", GLIBC)  # no THP in this kernel
    assert not wanted(["lead"], {}, MADVISE, "glibc 2.34")
    assert not wanted(["lead"], {}, MADVISE, "")  # musl: no glibc tunables
    assert wanted(["lead"], {}, MADVISE, "glibc 2.41")


def test_the_user_or_an_earlier_start_settles_it() -> None:
    assert not wanted(["lead"], {"DUO_HUGEPAGES": "0"}, MADVISE, GLIBC)
    assert not wanted(["lead"], {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, MADVISE, GLIBC)
    started = with_tunable({"PATH": "/bin"})
    assert not wanted(["lead"], started, MADVISE, GLIBC)  # no second restart


def test_the_tunable_is_added_to_the_users_and_taken_away_for_the_peers() -> None:
    theirs = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "PATH": "/bin"}
    started = with_tunable(theirs)
    assert started["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"
    assert user_environment(started) == theirs
    unset = with_tunable({"PATH": "/bin"})
    assert unset["GLIBC_TUNABLES"] == TUNABLE
    assert user_environment(unset) == {"PATH": "/bin"}
    assert user_environment({"GLIBC_TUNABLES": TUNABLE}) == {"GLIBC_TUNABLES": TUNABLE}  # theirs
