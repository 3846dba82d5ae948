// Starts mongo-java-server with its in-memory backend for the test suite.
// Usage: Launcher <host> <port>; port 0 picks a free one. Prints exactly one
// line, "listening <host>:<port>", once bound, then runs until killed.

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;

import java.net.Inet6Address;
import java.net.InetSocketAddress;
import java.util.concurrent.CountDownLatch;

public final class Launcher {

    private Launcher() {
    }

    private static void fail(int status, String message) {
        System.err.println("launcher: " + message);
        System.exit(status);
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 2) {
            fail(2, "usage: Launcher <host> <port>");
        }
        String host = args[0];
        int port = -1;
        try {
            port = Integer.parseInt(args[1]);
        } catch (NumberFormatException e) {
            // reported just below
        }
        if (port < 0 || port > 65535) {
            fail(2, "port must be a number from 0 to 65535, got '" + args[1] + "'");
        }

        MongoServer server = new MongoServer(new MemoryBackend());
        InetSocketAddress bound = null;
        try {
            server.bind(host, port);
            bound = server.getLocalAddress();
        } catch (RuntimeException e) {
            server.shutdownNow();
            fail(1, "could not listen on " + host + ":" + port + ": " + e);
        }
        // SIGTERM runs the hook, so a stopped server closes its sockets cleanly.
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown, "launcher-shutdown"));

        String address = bound.getAddress().getHostAddress();
        if (bound.getAddress() instanceof Inet6Address) {
            address = "[" + address + "]";
        }
        System.out.println("listening " + address + ":" + bound.getPort());
        System.out.flush();

        // Netty serves from its own threads; main only has to stay alive.
        new CountDownLatch(1).await();
    }
}
