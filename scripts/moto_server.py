"""moto's server, made as strict as the service where the tests rely on a refusal moto omits.

SQS's SendMessage refuses a message body with a character outside `#x9 | #xA | #xD | #x20 to
#xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF` (InvalidMessageContents, the SQS API
reference); moto stores any. Here such a send is refused as SQS refuses it, single or batched,
so a test of what reaches a queue cannot pass on moto's kindness. Started by
local/src/moto.rs with the pinned moto's Python; arguments as moto_server's.
"""

import sys

from moto.server import main
from moto.sqs import models
from moto.sqs.exceptions import SQSException


class InvalidMessageContents(SQSException):
    def __init__(self):
        super().__init__(
            "InvalidMessageContents",
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to "
            "#xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )


def allowed(c):
    n = ord(c)
    return n in (0x9, 0xA, 0xD) or 0x20 <= n <= 0xD7FF or 0xE000 <= n <= 0xFFFD or n >= 0x10000


moto_validate = models.SQSBackend._validate_message


def validate(self, queue, message_body, *args, **kwargs):
    if not all(allowed(c) for c in message_body):
        raise InvalidMessageContents()
    return moto_validate(self, queue, message_body, *args, **kwargs)


models.SQSBackend._validate_message = validate

if __name__ == "__main__":
    sys.exit(main())
