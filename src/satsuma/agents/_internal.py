"""What satsuma's other rooms use of agents beyond its public names; not for users.

``satsuma.agents`` exposes this module as ``internal``: the supervisor runs an agent's
incarnations on an ``Actor`` and a ``Mailbox`` that outlives them; a cluster's node runs
queued runs under their own ids (``run_with_id``, ``resume_with_id``, and
``resume_decided`` for a paused run's decisions), on agents opened with the lease and
state it took with the claim (``open_taken``), and its client and results read agent
classes (``spec_of``), typed answers and stored runs; the CLI reads agent classes and
typed answers; the cluster writes events as the JSON-lines log does (``json_line``) and
checks the decisions a paused run is resumed with (``check_decisions``) before it
queues them, and its recorder is a ``WatchedEvents`` (it says whether anyone streams
the run, so whether the model's answers are streamed); a server keeps decisions taken one call at a time in the store
(``stored_decisions``, ``decision_of``).
"""

from ._actor import Actor as Actor
from ._actor import new_run_id as new_run_id
from ._agent import seconds_or_none as seconds_or_none
from ._agent import spec_of as spec_of
from ._approval import check_decisions as check_decisions
from ._approval import stored_decisions as stored_decisions
from ._handle import resume_decided as resume_decided
from ._handle import resume_with_id as resume_with_id
from ._handle import run_with_id as run_with_id
from ._job import WatchedEvents as WatchedEvents
from ._jsonlog import json_line as json_line
from ._mailbox import Mailbox as Mailbox
from ._open import open_taken as open_taken
from ._output import OutputSpec as OutputSpec
from ._output import output_to_json as output_to_json
from ._persist import run_part as run_part
from ._persist import stored_answer as stored_answer
from ._repair import decision_of as decision_of
from ._result import NO_ANSWER as NO_ANSWER
from ._result import OutputT as OutputT
from ._result import raw_output as raw_output

__all__ = [
    "Actor",
    "Mailbox",
    "WatchedEvents",
    "check_decisions",
    "decision_of",
    "NO_ANSWER",
    "OutputSpec",
    "OutputT",
    "json_line",
    "new_run_id",
    "open_taken",
    "output_to_json",
    "raw_output",
    "resume_decided",
    "resume_with_id",
    "run_part",
    "run_with_id",
    "seconds_or_none",
    "spec_of",
    "stored_answer",
    "stored_decisions",
]
