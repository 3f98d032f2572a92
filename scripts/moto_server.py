"""moto's server, made as strict as the service where the tests rely on a refusal moto omits.

ChangeMessageVisibility (and each entry of its batch version) refuses the receipt handle of a
message that is not in flight (MessageNotInflight, the SQS API reference); moto changes its
visibility anyway. Here it is refused as SQS refuses it, so a record whose message was handed
out again cannot be proven with its old receive's handle.

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

class MessageNotInflight(SQSException):
    def __init__(self):
        super().__init__("MessageNotInflight", "The message referred to isn't in flight.")


moto_change_visibility = models.SQSBackend.change_message_visibility
moto_change_visibility_batch = models.SQSBackend.change_message_visibility_batch


def in_flight_or_refused(backend, queue_name, receipt_handle):
    for message in backend.get_queue(queue_name)._messages:
        if message.had_receipt_handle(receipt_handle) and message.visible:
            raise MessageNotInflight()


def change_visibility(self, queue_name, receipt_handle, visibility_timeout):
    in_flight_or_refused(self, queue_name, receipt_handle)
    return moto_change_visibility(self, queue_name, receipt_handle, visibility_timeout)


def change_visibility_batch(self, queue_name, entries):
    success, error, rest = [], [], []
    for entry in entries:
        try:
            in_flight_or_refused(self, queue_name, entry["ReceiptHandle"])
            rest.append(entry)
        except MessageNotInflight as e:
            error.append({"Id": entry["Id"], "SenderFault": True, "Code": "MessageNotInflight",
                          "Message": e.message})
    if rest:
        done, failed = moto_change_visibility_batch(self, queue_name, rest)
        success, error = done, error + failed
    return success, error


models.SQSBackend.change_message_visibility = change_visibility
models.SQSBackend.change_message_visibility_batch = change_visibility_batch

if __name__ == "__main__":
    sys.exit(main())
