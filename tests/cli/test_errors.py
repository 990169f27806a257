"""cli.errors.one_line_errors: the expected failures of a verb as one line, exit 2."""

import errno

import pytest

from npusan.cli.errors import EXIT_UNUSABLE, one_line_errors


@pytest.mark.parametrize("error, line", [
    (OSError(errno.ENOSPC, "No space left on device"), "npusan: error: No space left on device\n"),
    (OSError(errno.ENOENT, "No such file or directory", "t.bin"), "npusan: error: No such file or directory: t.bin\n"),
    (OSError("a message of its own"), "npusan: error: a message of its own\n"),
])
def test_an_os_error_is_one_line_with_its_file_name_when_it_has_one(capsys, error, line):
    """(An error without a file name ended in a colon: 'No space left on device:'.)"""

    @one_line_errors
    def verb():
        raise error

    with pytest.raises(SystemExit) as e:
        verb()
    assert e.value.code == EXIT_UNUSABLE
    assert capsys.readouterr().err == line
