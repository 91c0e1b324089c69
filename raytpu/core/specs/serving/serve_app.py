"""``serve_app: MODULE:APP``: a team's own Ray Serve application in ``code`` (a bound deployment or an app builder),
served by a ``kind: serve`` workload instead of the kit's LLM app. The rules that need no file system; the module's
own check reads the file (:func:`raytpu.teamcode.checks.serve_app_problems`). Standard library only.
"""

from __future__ import annotations

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs import workload_fields
from raytpu.core.specs.runtime import user_code

FIELD = "serve_app"
VALID = "MODULE:APP, a module inside `code` and a Ray Serve application it defines at top level (a bound " \
        "deployment, e.g. app = Scorer.bind(), or an app builder function), e.g. lm.serve:app"
LLM_FIELDS = workload_fields.group("llm")
"""The kit's LLM app's fields (:data:`raytpu.core.specs.spec.SERVING_FIELDS`): none goes with a team's own app."""


def problems(kind_name: str, *, serve_app: object, code: object, image: object,
             llm_fields: dict[str, object]) -> list[InvalidInput]:
    """``serve_app`` only on ``kind: serve``, spelled ``MODULE:APP``, never with the LLM fields, with ``code`` (or a
    team ``image`` whose Python path holds the module)."""
    if serve_app is None:
        return [] if code is None or kind_name != "serve" else [errors.forbidden(
            "code", code, "without serve_app (the kit's LLM app takes no code)", "serve_app: MODULE:APP with code")]
    if not workload_fields.takes(kind_name, FIELD):
        return [workload_fields.refusal(FIELD, serve_app, kind_name)]
    found = [errors.forbidden(FIELD, serve_app, f"with {name} (the kit's LLM app); a serve workload runs either a "
                              "model or its own app", f"serve_app without {name}, or {name} without serve_app")
             for name, value in llm_fields.items() if value is not None]
    if not (isinstance(serve_app, str) and user_code.TRAIN_LOOP.match(serve_app)
            and not user_code.train_loop_problems(FIELD, serve_app)):
        found.append(errors.invalid_value(FIELD, serve_app, "is not MODULE:APP", VALID))
    if code is None and image is None:
        found.append(errors.missing("code", "for serve_app on the kit's image (it carries no team code)",
                                    "code: ./src (a folder shipped with the RayService), or image: a team image "
                                    "whose Python path holds the module"))
    return found


def split(value: str) -> tuple[str, str]:
    """``(module, name)`` of a valid ``serve_app``."""
    module, _, name = value.partition(":")
    return module, name
