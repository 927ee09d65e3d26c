"""Actions that cannot run on the current file are disabled, and their tooltip says why."""

from __future__ import annotations

from gui_support import wait_loaded
from PySide6.QtWidgets import QToolBar

from inspector.gui.action_reasons import DANGEROUS_COMPARE, NO_FILE

pytest_plugins = ("gui_fixtures",)  # fixtures: window


def toolbar_tip(window, action) -> str:
    """The tooltip of `action`'s toolbar button, as a pointer resting on it shows it."""
    (bar,) = window.findChildren(QToolBar)
    return bar.widgetForAction(action).toolTip()


def test_no_file_disables_the_file_actions_saying_so(window):
    for action in (window.act_convert, window.act_compare, window.act_verify,
                   window.act_manifest, window.act_report, window.act_close):
        assert not action.isEnabled() and action.toolTip() == NO_FILE, action.text()
    assert toolbar_tip(window, window.act_convert) == NO_FILE


def test_a_dangerous_file_cannot_be_converted_or_compared_and_says_why(window, qtbot):
    benign, malicious = window.open_samples()
    wait_loaded(qtbot, benign)
    wait_loaded(qtbot, malicious, ("blocked",))

    window.file_list.setCurrentRow(window.docs.index(malicious))
    convert_why = ("Only a file loaded in the sandbox can be converted. This one: Not loaded: "
                   "the static scan found code that would run when unpickled")
    assert not window.act_convert.isEnabled()
    assert window.act_convert.toolTip() == convert_why
    assert toolbar_tip(window, window.act_convert) == convert_why
    assert not window.act_compare.isEnabled()
    assert toolbar_tip(window, window.act_compare) == DANGEROUS_COMPARE
    # the Integrity pane's own Compare button agrees with the toolbar
    assert not window.integrity.compare_button.isEnabled()
    assert window.integrity.compare_button.toolTip() == DANGEROUS_COMPARE
    # what can run on it still can: its manifest and its verification read bytes only
    assert window.act_verify.isEnabled() and window.integrity.choose_button.isEnabled()

    window.file_list.setCurrentRow(window.docs.index(benign))
    for action in (window.act_convert, window.act_compare):
        assert action.isEnabled()
        assert action.toolTip() == action.statusTip() != ""  # back to what it does
    assert window.integrity.compare_button.isEnabled()
    assert window.integrity.compare_button.toolTip().startswith("Diff against another")
