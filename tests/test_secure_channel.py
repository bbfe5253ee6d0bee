"""The sealed pairwise channels of the secret-shared exchange (issue 26, point 7; Theorem 2.1 of Xiao, Ye &
Devadas assumes secure pairwise channels): an eavesdropper's reconstruction from the transcript, tampering,
replay and redirection, and the results against the plain exchange."""

from __future__ import annotations

import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import RandomizedADMM
from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.conformance import check_determinism, consensus_problem
from privcvx.algorithms.secure_sum import SEALED_SHARE
from privcvx.errors import PrivacyError
from privcvx.messages import Message, Transcript
from privcvx.privacy.noise import SecureNoise, SeededNoise
from privcvx.privacy.secret_sharing import FixedPointSharing
from privcvx.privacy.secure_channel import KEY_BYTES, PairwiseChannels

EXACT = dict(scale_bits=1074, modulus=2 ** 1279 - 1)  # every float is encoded exactly: iterates bitwise the plain's
AGENTS, ROUNDS, SEED = 4, 8, 2


pytestmark = pytest.mark.usefixtures("quiet_seeds")


def eavesdrop(transcript: Transcript, sharing: FixedPointSharing, residues) -> dict[tuple[int, str], np.ndarray]:
    """The eavesdropper's reconstruction of Algorithm 3: from round t's messages alone,
    x_i^{t-1} = partial_i - sum of the shares i received + sum of the shares i sent (mod p).

    ``residues(message)`` reads the share a message carries: the eavesdropper who holds no key can only read
    the sealed bytes as limbs; whoever holds the keys opens them.
    """
    recovered = {}
    for t in sorted({m.round for m in transcript if "partial" in m.payload}):
        messages = transcript.round(t)
        for partial in (m for m in messages if "partial" in m.payload):
            i = partial.sender
            sent = [residues(m) for m in messages if SEALED_SHARE in m.payload and m.sender == i]
            received = [residues(m) for m in messages if SEALED_SHARE in m.payload and m.receiver == i]
            negated = [[(-r) % sharing.modulus for r in share] for share in received]
            recovered[t, i] = sharing.decode(sharing.add([sharing.from_limbs(partial["partial"]), *negated, *sent]))
    return recovered


def as_limbs(sharing: FixedPointSharing, dim: int):
    """How a keyless eavesdropper reads a sealed share: its bytes (the tag dropped) as the share's limbs."""
    def read(message: Message) -> list[int]:
        body = message[SEALED_SHARE][:dim * sharing.limbs * 8].tobytes()
        return [r % sharing.modulus for r in sharing.from_limbs(np.frombuffer(body, "<u8").reshape(dim, -1))]
    return read


def test_the_transcript_alone_no_longer_reconstructs_any_x_i_and_the_keys_do():
    problem = consensus_problem(agents=AGENTS, bound=None)
    topology = pc.Topology.complete()
    algorithm = RandomizedADMM(exchange="secret_sharing", **EXACT)
    shared = problem.solve(algorithm, topology, rounds=ROUNDS, seed=SEED)
    plain = problem.solve(RandomizedADMM(), topology, rounds=ROUNDS, seed=SEED)
    truth = {(m.round, m.sender): m["x"] for m in plain.transcript}  # x_i^{t-1}, broadcast in round t
    sharing, dim = algorithm.sharing(AGENTS), problem.layouts[0].dim

    # the attack works: whoever holds the keys (here derived from the research seed, as anyone who knows it can)
    # opens the shares and recovers every x_i^{t-1} of every round exactly
    bound = topology.bind(problem.names)
    channels = {}
    for index, name in enumerate(problem.names):
        channels[name] = PairwiseChannels(name, AgentContext.for_agent(problem, index, seed=SEED, topology=bound)
                                          .noise.key_material(KEY_BYTES))
    keys = {m.sender: m["public_key"] for m in shared.transcript.round(0)}
    assert set(keys) == set(problem.names) and all(k.dtype == np.uint8 for k in keys.values())
    for name, channel in channels.items():
        assert np.array_equal(channel.public_key, keys[name])
        channel.connect({peer: key for peer, key in keys.items() if peer != name})

    def opened(message: Message) -> list[int]:
        plaintext = channels[message.receiver].open(message.sender, message.round, message.phase,
                                                    message[SEALED_SHARE])
        return sharing.from_limbs(np.frombuffer(plaintext, "<u8").reshape(dim, -1))

    with_keys = eavesdrop(shared.transcript, sharing, opened)
    assert len(with_keys) == ROUNDS * AGENTS
    assert all(np.array_equal(x, truth[key]) for key, x in with_keys.items())

    # from the transcript alone: the sealed bytes are no share, and no coordinate of any x_i comes within 1
    without_keys = eavesdrop(shared.transcript, sharing, as_limbs(sharing, dim))
    assert len(without_keys) == ROUNDS * AGENTS
    assert min(np.min(np.abs(x - truth[key])) for key, x in without_keys.items()) > 1.0
    assert {key for m in shared.transcript for key in m.payload} == {"public_key", SEALED_SHARE, "partial"}


def test_encryption_leaves_the_run_unchanged():
    problem = consensus_problem(agents=AGENTS, bound=None)
    plain = problem.solve(RandomizedADMM(), pc.Topology.complete(), rounds=40, seed=SEED)
    shared = problem.solve(RandomizedADMM(exchange="secret_sharing", **EXACT), pc.Topology.complete(), rounds=40,
                           seed=SEED)
    assert np.array_equal(np.stack(plain.z), np.stack(shared.z))
    # the history's objective is taken at w, which under secret sharing is the sum reconstructed in round t, of
    # the iterates x^{t-1}: one round behind the plain run's, and the same up to the rounding of the mean
    assert np.allclose(shared.history["objective"].to_numpy()[1:], plain.history["objective"].to_numpy()[:-1],
                       rtol=1e-14, atol=0)
    # the same seed seals the same shares (bitwise reproducible transcripts); another seed, other keys
    again = problem.solve(RandomizedADMM(exchange="secret_sharing", **EXACT), pc.Topology.complete(), rounds=40,
                          seed=SEED)
    assert shared.transcript.same_as(again.transcript)


def _programs(problem, topology, seed=1):
    ready = RandomizedADMM(exchange="secret_sharing").prepare(problem, topology, rounds=3)
    return [ready.agent_program(agent, AgentContext.for_agent(problem, i, seed=seed, topology=topology, rounds=3))
            for i, agent in enumerate(problem.agents)]


def test_an_altered_replayed_redirected_or_forged_share_is_refused():
    problem = consensus_problem(agents=AGENTS, bound=None)
    topology = pc.Topology.complete().bind(problem.names)
    programs = _programs(problem, topology)
    keys = [m for p in programs for m in p.start()]
    shares = [m for p in programs for m in p.step(1, [k for k in keys if k.sender != p.name], phase=0)]
    receiver = programs[1]
    inbox = [m for m in shares if m.receiver == receiver.name]
    original = next(m for m in inbox if m.sender == "agent-0")
    others = [m for m in inbox if m is not original]

    def refused(message: Message) -> None:
        with pytest.raises(PrivacyError, match="agent-1.*agent-0.*fails authentication"):
            receiver.step(1, [*others, message], phase=1)

    altered = original[SEALED_SHARE].copy()
    altered[3] ^= 1
    refused(Message(1, "agent-0", "agent-1", {SEALED_SHARE: altered}, phase=1))
    # the share agent-0 sealed for agent-2, redirected to agent-1
    meant_for_2 = next(m for m in shares if m.sender == "agent-0" and m.receiver == "agent-2")
    refused(Message(1, "agent-0", "agent-1", meant_for_2.payload, phase=1))
    # agent-0's share to agent-1 claimed by agent-3 (in place of agent-3's own)
    forged = Message(1, "agent-3", "agent-1", original.payload, phase=1)
    with pytest.raises(PrivacyError, match="agent-1.*agent-3.*fails authentication"):
        receiver.step(1, [*[m for m in others if m.sender != "agent-3"], original, forged], phase=1)
    # replayed in another round or phase
    for t, phase in ((2, 1), (1, 2)):
        with pytest.raises(PrivacyError, match="agent-1.*fails authentication"):
            receiver.secure.channels.open("agent-0", t, phase, original[SEALED_SHARE])
    # a duplicate is refused, the untouched inbox goes through
    with pytest.raises(PrivacyError, match="two 'sealed_share' messages from 'agent-0'"):
        receiver.step(1, [*inbox, original], phase=1)
    (partial,) = receiver.step(1, inbox, phase=1)
    assert set(partial.payload) == {"partial"} and partial.receiver is None


def test_channels_refuse_bad_keys_and_keep_their_key_through_a_state_round_trip():
    with pytest.raises(PrivacyError, match="agent-0.*32 bytes"):
        PairwiseChannels("agent-0", b"\x01" * 31)
    channel = PairwiseChannels("agent-0", SecureNoise().key_material(KEY_BYTES))
    with pytest.raises(PrivacyError, match="agent-0.*public_key of agent-1"):
        channel.connect({"agent-1": np.zeros(31, dtype=np.uint8)})
    with pytest.raises(PrivacyError, match="agent-0.*not usable"):  # a low-order point (the all-zero key)
        channel.connect({"agent-1": np.zeros(KEY_BYTES, dtype=np.uint8)})
    peer = PairwiseChannels("agent-1", SecureNoise().key_material(KEY_BYTES))
    channel.connect({"agent-1": peer.public_key})
    peer.connect({"agent-0": channel.public_key})
    restored = PairwiseChannels("agent-0", SecureNoise().key_material(KEY_BYTES))
    restored.load_state_dict(channel.state_dict())
    sealed = restored.seal("agent-1", 5, 1, np.arange(4, dtype="<u8"))
    assert peer.open("agent-0", 5, 1, sealed) == np.arange(4, dtype="<u8").tobytes()
    assert not np.array_equal(restored.public_key, PairwiseChannels("agent-0", SecureNoise().key_material(
        KEY_BYTES)).public_key)  # the secure path draws a new key each time
    # the seeded path: the key follows the seed and does not move the noise stream
    first, second = SeededNoise(7), SeededNoise(7)
    assert first.key_material(KEY_BYTES) == second.key_material(KEY_BYTES) != SeededNoise(8).key_material(KEY_BYTES)
    assert np.array_equal(first.uniform(5), SeededNoise(7).uniform(5))


def test_a_private_secret_shared_run_resumes_from_its_checkpoint_bitwise():
    # the keys were agreed in round 0 only: the resumed run seals and opens with the private key and the peers'
    # public keys its checkpoint holds, and continues bitwise (serial backend; the process one: test_ldp.py)
    check_determinism(RandomizedADMM(exchange="secret_sharing", noise_rate=2.0), rounds=6, backends=("serial",))
