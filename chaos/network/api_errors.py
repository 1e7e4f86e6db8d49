"""API errors with Toxiproxy's messages and status codes (its api.go).

They live apart from the API because the layers under it raise them too: JSON decoding
("bad request body: …"), a proxy whose listener cannot bind (500 "listen tcp …") and a toxic's
stream ("stream was invalid …").
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def bad_request_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(what: str) -> ApiError:
    return ApiError(f"missing required field: {what}", 400)


ERR_PROXY_NOT_FOUND = ("proxy not found", 404)
ERR_PROXY_EXISTS = ("proxy already exists", 409)
ERR_INVALID_STREAM = ("stream was invalid, can be either upstream or downstream", 400)
ERR_INVALID_TOXIC_TYPE = ("invalid toxic type", 400)
ERR_TOXIC_EXISTS = ("toxic already exists", 409)
ERR_TOXIC_NOT_FOUND = ("toxic not found", 404)


def api_error(error: tuple[str, int]) -> ApiError:
    return ApiError(*error)
