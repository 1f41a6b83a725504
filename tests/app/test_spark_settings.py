"""The settings partialflow gives a Spark Connect session must be ones a client may set.

Through Connect (``sc://``) only runtime SQL settings can be changed; a static one was
refused at every start with a warning in the server's log. Checked on the session Spark
(classic), which answers the same question: ``isModifiable`` is what Connect enforces.
"""

from __future__ import annotations

from partialflow.server import spark as spark_module


def test_every_setting_sent_over_connect_is_modifiable_at_run_time(spark) -> None:
    refused = [k for k in spark_module._SQL_DEFAULTS if not spark.conf.isModifiable(k)]
    assert refused == [], f"static settings cannot be set through Spark Connect: {refused}"


def test_the_call_site_setting_stays_on_the_classic_session(spark) -> None:
    # Moved out of the Connect settings, not dropped: a classic session still has it off.
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
