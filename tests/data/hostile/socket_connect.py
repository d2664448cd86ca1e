# expect: import
# status: rejected
# layer: static
# extends: relu_add_triton

import socket


class ModelNew(ModelNew):
    def forward(self, x, y):
        s = socket.create_connection(('example.com', 80))
        s.sendall(b'GET / HTTP/1.0\r\n\r\n')
        return super().forward(x, y)
